"""A deterministic corpus for measuring secret detection: fake credentials and hard innocent text.

Every credential is generated at run time from a fixed seed in the provider's documented shape
(prefix, alphabet, length); none is real and none appears literally in this file, so nothing
here looks like a leaked key to a repository scanner. ``corpus()`` returns the samples, each
with a category, the text and whether it holds a secret. The same seed always gives the same
corpus (``tests/memories/pipeline/test_secret_detection.py`` and ``bench/secret_detection.py`` use it).

Positives: each credential is embedded in prose, code, shell, logs, JSON, YAML or ``.env``
text, in English, Chinese and Japanese. Negatives: text that looks dangerous to a naive
pattern but is not a credential (hashes, ids, blobs, public keys, placeholders, docs about
secrets, code reading secrets from the environment ...).

Placeholders are negatives: a value that is visibly not a real credential (``sk-...``,
``<your-api-key>``, ``${DB_PASSWORD}``, ``xxxxxxxx``, ``****``, the documented AWS example
ids ending in ``EXAMPLE``, ``your-token-here``, a password literally ``password``) is safe
to store. Stripe publishable keys (``pk_live_``/``pk_test_``) are designed to be public and
are negatives; Stripe secret and restricted keys, live or test, are positives.
"""
from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

SEED = 20261130
PER_CATEGORY = 26

LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = LOWER.upper()
DIGITS = "0123456789"
B62 = UPPER + LOWER + DIGITS
B64 = B62 + "+/"
B64URL = B62 + "-_"
HEX = "0123456789abcdef"
B32 = UPPER + "234567"


@dataclass(frozen=True)
class Sample:
    category: str
    text: str
    secret: bool


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _pick(rng: random.Random, options: list[str] | tuple[str, ...]) -> str:
    return options[rng.randrange(len(options))]


# --------------------------------------------------------------------------- contexts

# Neutral contexts: no key name next to the value, so detection must come from its shape.
SHAPE_CONTEXTS = (
    "I rotated it yesterday, the new one is {s} and the deploy works again.",
    "FYI for staging use {s} until Friday.",
    "client = Client(credential=\"{s}\", timeout=30)",
    "const client = new Client({{ credential: '{s}' }});",
    "curl -s -H \"X-Auth: {s}\" https://api.internal.example/v1/status",
    "2024-05-01T12:00:03Z DEBUG outbound: using credential {s} for request 42",
    "{{\"service\": \"deploy-bot\", \"credential\": \"{s}\", \"region\": \"eu-west-1\"}}",
    "deploy:\n  service: deploy-bot\n  credential: {s}\n  region: eu-west-1",
    "| env | value |\n|---|---|\n| prod | {s} |",
    "新的凭据是 {s}，请在周五前更新配置。",
    "本番用のキーは{s}です。漏らさないでください。",
    "Note to self: `{s}` is the one for the billing sandbox.",
    "docker run -e CREDENTIAL={s} ghcr.io/acme/worker:latest",
    "Error 401 from upstream when sending {s}; the key was revoked, ask ops for a new one.",
)


def _in_context(rng: random.Random, secret: str, contexts: tuple[str, ...] = SHAPE_CONTEXTS) -> str:
    return _pick(rng, contexts).format(s=secret)


# --------------------------------------------------------------------------- positive generators

def _aws_access_key_id(rng: random.Random) -> str:
    return _in_context(rng, _pick(rng, ("AKIA", "ASIA")) + _s(rng, B32, 16))


AWS_SECRET_CONTEXTS = (
    "[default]\naws_access_key_id = {kid}\naws_secret_access_key = {s}\nregion = us-east-1",
    "export AWS_SECRET_ACCESS_KEY={s}",
    "{{\"Credentials\": {{\"AccessKeyId\": \"{kid}\", \"SecretAccessKey\": \"{s}\", \"Expiration\": \"2025-01-01T00:00:00Z\"}}}}",
    "aws configure set aws_secret_access_key {s}",
    "s3:\n  bucket: acme-logs\n  secret_access_key: {s}",
    "The AWS secret access key is {s}, keep it out of the wiki.",
    "provider \"aws\" {{\n  access_key = \"{kid}\"\n  secret_key = \"{s}\"\n}}",
    "AWS 的 secret access key：{s}",
)


def _aws_secret_access_key(rng: random.Random) -> str:
    kid = "AKIA" + _s(rng, B32, 16)
    return _pick(rng, AWS_SECRET_CONTEXTS).format(s=_s(rng, B64, 40), kid=kid)


def _github_classic(rng: random.Random) -> str:
    return _in_context(rng, _pick(rng, ("ghp", "gho", "ghu", "ghs", "ghr")) + "_" + _s(rng, B62, 36))


def _github_fine_grained(rng: random.Random) -> str:
    token = "github" + "_pat_" + "11" + _s(rng, UPPER + DIGITS, 20) + "_" + _s(rng, B62, 59)
    return _in_context(rng, token)


def _openai(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        key = "sk-" + _s(rng, B62, 20) + "T3Blbk" + "FJ" + _s(rng, B62, 20)
    elif kind == 1:
        key = "sk-" + "proj-" + _s(rng, B64URL, 74) + "T3Blbk" + "FJ" + _s(rng, B64URL, 74)
    else:
        key = "sk-" + "svcacct-" + _s(rng, B64URL, 74) + "T3Blbk" + "FJ" + _s(rng, B64URL, 74)
    return _in_context(rng, key)


def _anthropic(rng: random.Random) -> str:
    kind = _pick(rng, ("api03", "api03", "admin01"))
    return _in_context(rng, "sk-" + "ant-" + kind + "-" + _s(rng, B64URL, 93) + "AA")


def _slack_token(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        token = "xo" + "xb-" + _s(rng, DIGITS, 12) + "-" + _s(rng, DIGITS, 13) + "-" + _s(rng, B62, 24)
    elif kind == 1:
        token = "xo" + "xp-" + "-".join(_s(rng, DIGITS, n) for n in (12, 12, 13)) + "-" + _s(rng, HEX, 32)
    else:
        token = "xa" + "pp-1-A" + _s(rng, UPPER + DIGITS, 10) + "-" + _s(rng, DIGITS, 13) + "-" + _s(rng, HEX, 64)
    return _in_context(rng, token)


def _slack_webhook(rng: random.Random) -> str:
    url = ("https://hooks." + "slack.com/services/T" + _s(rng, UPPER + DIGITS, 10) + "/B"
           + _s(rng, UPPER + DIGITS, 10) + "/" + _s(rng, B62, 24))
    contexts = (
        "SLACK_WEBHOOK_URL={s}",
        "requests.post(\"{s}\", json={{\"text\": \"deploy finished\"}})",
        "Alerts go to #ops through {s} (set up by Dana).",
        "alertmanager:\n  slack_configs:\n    - api_url: '{s}'\n      channel: '#alerts'",
        "告警通过 {s} 发到频道。",
    )
    return _pick(rng, contexts).format(s=url)


def _stripe(rng: random.Random) -> str:
    prefix = _pick(rng, ("sk_live_", "rk_live_", "sk_test_", "rk_test_"))
    return _in_context(rng, prefix + "51" + _s(rng, B62, rng.choice((22, 97))))


def _google_api_key(rng: random.Random) -> str:
    key = "AI" + "za" + _s(rng, B64URL, 35)
    contexts = (*SHAPE_CONTEXTS, "https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={s}")
    return _in_context(rng, key, contexts)


PEM_KINDS = ("RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
             "DSA PRIVATE KEY")


def _pem_private_key(rng: random.Random) -> str:
    kind = _pick(rng, PEM_KINDS)
    lines = [_s(rng, B64, 64) for _ in range(rng.randint(3, 8))] + [_s(rng, B64, rng.randint(8, 60)) + "=="]
    block = f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----"
    contexts = (
        "Here is the deploy key for the build box:\n{s}",
        "ssh:\n  deploy_key: |\n    {indented}",
        "{{\"type\": \"service_account\", \"project_id\": \"acme-prod\", \"private_key\": \"{escaped}\"}}",
        "cat > ~/.ssh/id_deploy <<'EOF'\n{s}\nEOF",
        "部署密钥如下：\n{s}",
    )
    return _pick(rng, contexts).format(s=block, indented=block.replace("\n", "\n    "), escaped=block.replace("\n", "\\n"))


def _b64url_json(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    alg = _pick(rng, ("HS256", "RS256", "ES256"))
    header = _b64url_json({"alg": alg, "typ": "JWT"})
    payload = _b64url_json({"sub": str(rng.randrange(10**6)), "name": _pick(rng, ("alice", "bob", "svc-ci")),
                            "iat": 1700000000 + rng.randrange(10**7), "scope": _pick(rng, ("read", "admin", "deploy"))})
    signature = _s(rng, B64URL, {"HS256": 43, "RS256": 342, "ES256": 86}[alg])
    token = f"{header}.{payload}.{signature}"
    contexts = (*SHAPE_CONTEXTS, "Authorization: Bearer {s}", "Cookie: session={s}; Path=/; HttpOnly")
    return _in_context(rng, token, contexts)


def _password(rng: random.Random, url_safe: bool = False) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return _s(rng, B62, rng.randint(12, 28))
    if kind == 1:
        word = _pick(rng, ("Winter", "Falcon", "Harbor", "Granite", "Maple", "Orbit", "Tango"))
        return word + _s(rng, DIGITS, 4) + _pick(rng, ("!", "#", "$", "%", "-", "_", "~"))
    if kind == 2:
        return _s(rng, HEX, rng.choice((32, 64)))
    special = "-_.~" if url_safe else "!#%^*-_.~+="
    return _s(rng, B62 + special, rng.randint(14, 30))


def _connection_string(rng: random.Random) -> str:
    user = _pick(rng, ("app", "admin", "svc_billing", "root", "etl", "deploy"))
    pw = _password(rng, url_safe=True)
    host = _pick(rng, ("db.internal.acme.io", "10.0.3.17", "pg-prod-1.cluster-abc.eu-west-1.rds.amazonaws.com",
                       "localhost", "cluster0.ab1cd.mongodb.net", "cache.acme.io"))
    kind = rng.randrange(6)
    if kind == 0:
        url = f"postgres://{user}:{pw}@{host}:5432/app"
    elif kind == 1:
        url = f"postgresql+psycopg://{user}:{pw}@{host}/analytics?sslmode=require"
    elif kind == 2:
        url = f"mysql://{user}:{pw}@{host}:3306/shop"
    elif kind == 3:
        url = f"mongodb+srv://{user}:{pw}@{host}/?retryWrites=true&w=majority"
    elif kind == 4:
        url = f"redis://:{pw}@{host}:6379/0"
    else:
        url = f"amqp://{user}:{pw}@{host}:5672/%2F"
    contexts = (
        "DATABASE_URL={s}",
        "engine = create_engine(\"{s}\")",
        "We moved the app to {s} last night.",
        "db:\n  url: {s}\n  pool: 10",
        "{{\"dsn\": \"{s}\"}}",
        "psql {s} -c 'select 1'",
        "连接串是 {s}",
    )
    return _pick(rng, contexts).format(s=url)


ENV_NAMES = ("DB_PASSWORD", "SECRET_KEY", "API_TOKEN", "POSTGRES_PASSWORD", "DJANGO_SECRET_KEY", "JWT_SECRET",
             "MYSQL_ROOT_PASSWORD", "REDIS_PASSWORD", "SMTP_PASSWORD", "CLIENT_SECRET", "AUTH_TOKEN", "API_KEY",
             "ENCRYPTION_KEY", "WEBHOOK_SECRET", "SESSION_SECRET", "ADMIN_PASSWORD")


def _env_assignment(rng: random.Random) -> str:
    name = _pick(rng, ENV_NAMES)
    value = _password(rng)
    quote = _pick(rng, ("", "", "\"", "'"))
    line = f"{name}={quote}{value}{quote}"
    kind = rng.randrange(6)
    if kind == 0:
        return line
    if kind == 1:
        return f"# .env for staging\nDEBUG=false\nALLOWED_HOSTS=staging.acme.io\n{line}\nLOG_LEVEL=info"
    if kind == 2:
        return f"services:\n  db:\n    image: postgres:16\n    environment:\n      - {line}"
    if kind == 3:
        return f"export {line}"
    if kind == 4:
        return f"{name.lower()}: \"{value}\""
    return f"settings.py 里写死了 {name} = \"{value}\"，要改成读环境变量。"


POSITIVES: dict[str, Callable[[random.Random], str]] = {
    "aws_access_key_id": _aws_access_key_id,
    "aws_secret_access_key": _aws_secret_access_key,
    "github_classic": _github_classic,
    "github_fine_grained": _github_fine_grained,
    "openai": _openai,
    "anthropic": _anthropic,
    "slack_token": _slack_token,
    "slack_webhook": _slack_webhook,
    "stripe": _stripe,
    "google_api_key": _google_api_key,
    "pem_private_key": _pem_private_key,
    "jwt": _jwt,
    "connection_string": _connection_string,
    "env_assignment": _env_assignment,
}


# --------------------------------------------------------------------------- negative generators

def _git_sha(rng: random.Random) -> str:
    sha, short = _s(rng, HEX, 40), _s(rng, HEX, 7)
    return _pick(rng, (
        "commit {sha}\nAuthor: Dana <dana@acme.io>\nDate:   Tue May 7 10:12:44 2024 +0200\n\n    Fix token refresh race",
        "Reverted {short} because it broke the password reset flow.",
        "git cherry-pick {sha}",
        "{short} (HEAD -> main, origin/main) Rotate API keys monthly, not weekly",
        "The fix landed in {sha}; see the PR for the secret-handling discussion.",
        "pip install git+https://github.com/acme/sdk.git@{sha}",
        "uses: actions/checkout@{sha} # v4.1.1",
        "在 {short} 里修复了令牌过期的问题。",
    )).format(sha=sha, short=short)


def _uuid(rng: random.Random) -> str:
    value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return _pick(rng, (
        "request_id={u} status=200 duration_ms=41",
        "{{\"id\": \"{u}\", \"type\": \"api_key\", \"created\": \"2024-02-01\"}}",
        "Token {u} not found in cache (this is the token's id, not its value).",
        "tenant: {u}\nplan: enterprise",
        "DELETE /api/tokens/{u} HTTP/1.1",
        "The secret's id is {u}; the value itself lives in Vault.",
        "trace {u} span 3 auth.verify_password ok",
    )).format(u=value)


def _base64_blob(rng: random.Random) -> str:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(rng.randint(120, 600))).decode()
    return _pick(rng, (
        "<img alt=\"logo\" src=\"data:image/png;base64,{b}\">",
        "{{\"avatar\": \"data:image/png;base64,{b}\"}}",
        "background-image: url(data:image/png;base64,{b});",
        "The thumbnail is inlined as base64: {b}",
        "attachment:\n  filename: chart.png\n  content: {b}",
    )).format(b=png)


def _hash(rng: random.Random) -> str:
    sha256, sha1, md5 = _s(rng, HEX, 64), _s(rng, HEX, 40), _s(rng, HEX, 32)
    return _pick(rng, (
        "{sha256}  bhgbrain-1.4.0.tar.gz",
        "requests==2.32.3 --hash=sha256:{sha256}",
        "image: ghcr.io/acme/api@sha256:{sha256}",
        "Password hashes are stored as sha256 with a per-user salt, e.g. {sha256}.",
        "md5 of the backup: {md5}; sha1: {sha1}",
        "\"integrity\": \"sha512-{b64}\"",
        "ETag: \"{md5}\"",
        "checksum: {sha256}",
        "文件校验和 sha256：{sha256}",
    )).format(sha256=sha256, sha1=sha1, md5=md5, b64=_s(rng, B64, 86) + "==")


def _placeholder(rng: random.Random) -> str:
    # Examples that documentation writes in place of real credentials.
    aws_example = "AKIA" + "IOSFODNN7" + "EXAMPLE"
    aws_secret_example = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    xs = "x" * rng.randint(20, 40)
    return _pick(rng, (
        "OPENAI_API_KEY=sk-...",
        "Set OPENAI_API_KEY to your key (it starts with sk-...).",
        "api_key = \"<your-api-key>\"",
        "export ANTHROPIC_API_KEY=<your-anthropic-key>",
        f"aws_access_key_id = {aws_example}",
        f"aws_secret_access_key = {aws_secret_example}",
        f"The AWS docs use {aws_example} as the example access key id.",
        "GITHUB_TOKEN=ghp_" + xs,
        "SLACK_BOT_TOKEN=xoxb-your-bot-token",
        "https://hooks." + "slack.com/services/T00000000/B00000000/" + "X" * 24,
        "DB_PASSWORD=${DB_PASSWORD}",
        "password: \"{{ vault_db_password }}\"",
        "token=*** (redacted by the log filter)",
        "password=******** user=admin host=db1",
        "SECRET_KEY=your-secret-key-here",
        "STRIPE_SECRET_KEY=sk_live_...",
        "API_TOKEN=\"\"",
        "postgres://user:password@localhost:5432/mydb",
        "mysql://USER:PASSWORD@HOST:3306/DB",
        "Authorization: Bearer <token>",
        "curl -H \"Authorization: Bearer $API_TOKEN\" https://api.acme.io/v1/me",
        "client_secret=REPLACE_ME",
        "api_key: " + xs,
        "SECRET_KEY=changeme",
        "{\"password\": \"[REDACTED]\"}",
    ))


def _connection_string_no_password(rng: random.Random) -> str:
    host = _pick(rng, ("db.internal.acme.io", "127.0.0.1", "pg-replica-2", "mongo1.acme.io"))
    return _pick(rng, (
        "DATABASE_URL=postgres://postgres@{h}:5432/postgres",
        "redis://{h}:6379/0",
        "mongodb://{h}:27017,{h}:27018/?replicaSet=rs0",
        "psql postgresql://app@{h}/app?sslmode=verify-full",
        "The broker URL is amqp://guest@{h}:5672// (password comes from the secret store).",
        "url: postgresql://${{DB_USER}}:${{DB_PASSWORD}}@{h}:5432/app",
        "DATABASE_URL=\"mysql://{{user}}:{{password}}@{h}/shop\"",
        "jdbc:postgresql://{h}:5432/app?user=app&ssl=true",
        "ssh://git@{h}:2222/acme/infra.git",
        "sqlite:////var/lib/app/db.sqlite3",
        "https://{h}:8443/api/v2/health",
        "连接 postgres://readonly@{h}/analytics 只读，不需要密码。",
    )).format(h=host)


def _docs_prose(rng: random.Random) -> str:
    return _pick(rng, (
        "Rotate API keys every 90 days and revoke any key that was pasted into a chat.",
        "Personal access tokens inherit the user's permissions; prefer fine-grained tokens scoped to one repository.",
        "Never commit .env files: the secret key, database password and API tokens belong in the secret manager.",
        "The access token expires after one hour; use the refresh token to get a new one.",
        "Passwords must be at least 12 characters and are hashed with argon2id.",
        "If a private key leaks, revoke the certificate and generate a new key pair.",
        "Slack bot tokens start with xoxb- and user tokens with xoxp-; webhooks need no token.",
        "AWS access key ids begin with AKIA (long-term) or ASIA (temporary STS credentials).",
        "OpenAI keys begin with sk- and project keys with sk-proj-; Anthropic keys with sk-ant-.",
        "A JWT has three base64url parts separated by dots: header, payload and signature.",
        "Stripe secret keys (sk_live_) must stay on the server; publishable keys (pk_live_) go in the browser.",
        "Google API keys start with AIza; restrict them by HTTP referrer or IP.",
        "Store the SSH private key with mode 0600; the public key goes in authorized_keys.",
        "token: see the vault docs",
        "password: required, minimum 12 characters",
        "The CSRF token is sent in the X-CSRFToken header on every unsafe request.",
        "Our token bucket rate limiter allows 100 requests per minute per API key.",
        "To reset a password, the user gets a one-time link valid for 30 minutes.",
        "GitHub push protection blocks pushes that contain a ghp_ token.",
        "Set the secret in GitHub Actions and read it as secrets.DEPLOY_TOKEN.",
    ))


def _env_var_code(rng: random.Random) -> str:
    return _pick(rng, (
        "api_key = os.environ[\"OPENAI_API_KEY\"]",
        "client = OpenAI(api_key=os.getenv(\"OPENAI_API_KEY\"))",
        "const token = process.env.GITHUB_TOKEN;",
        "password=settings.DATABASES[\"default\"][\"PASSWORD\"]",
        "SECRET_KEY = env(\"DJANGO_SECRET_KEY\")",
        "conn = psycopg.connect(host=host, user=user, password=password)",
        "token = secrets.token_urlsafe(32)",
        "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db-credentials\n        key: password",
        "with:\n  token: ${{ secrets.GITHUB_TOKEN }}",
        "export AWS_SECRET_ACCESS_KEY=$(vault kv get -field=secret_key aws/ci)",
        "let apiKey = std::env::var(\"ANTHROPIC_API_KEY\")?;",
        "api_key: str = Field(default=None, description=\"read from BHGBRAIN_API_KEY\")",
        "password_hash = make_password(raw_password)",
        "if token is None: raise AuthRequired(\"missing token\")",
        "DB_PASSWORD_FILE=/run/secrets/db_password",
        "headers = {\"Authorization\": f\"Bearer {token}\"}",
        "key := os.Getenv(\"STRIPE_SECRET_KEY\")",
        "self.access_token = response.json()[\"access_token\"]",
        "token = jwt.encode(payload, settings.JWT_SECRET, algorithm=\"HS256\")",
        "def check_password(password: str, encoded: str) -> bool:",
        "password = getpass.getpass(\"DB password: \")",
        "auth_token=self.auth_token,",
    ))


def _css_colour(rng: random.Random) -> str:
    c1, c2 = _s(rng, HEX, 6), _s(rng, HEX, 8)
    return _pick(rng, (
        ".btn-primary {{ color: #{a}; background: #{b}; }}",
        "--color-token-accent: #{a};",
        "theme:\n  primary: \"#{a}\"\n  overlay: \"#{b}\"",
        "The brand colours are #{a} and #{b} (with alpha).",
        "<rect fill=\"#{a}\" stroke=\"#{b}\"/>",
        "{{\"token\": \"color.accent\", \"value\": \"#{a}\"}}",
    )).format(a=c1, b=c2)


def _version_string(rng: random.Random) -> str:
    v = f"{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}"
    return _pick(rng, (
        "Django=={v}\npsycopg[binary]=={v}\nopenai=={v}",
        "Upgraded tokenizers to {v} and the token counts changed slightly.",
        "image: postgres:{v}-alpine",
        "\"version\": \"{v}-rc.1+build.{n}\"",
        "release v{v} fixes the password reset email",
        "python 3.11.{n} / node v20.{n}.0 / go1.22.{n}",
        "token-cli {v} (build {n}, 2024-05-01)",
    )).format(v=v, n=rng.randint(1, 999))


def _long_identifier(rng: random.Random) -> str:
    return _pick(rng, (
        "class AbstractSingletonTokenRefreshSchedulerFactoryBean(BaseFactory): ...",
        "MAX_TOKEN_BUDGET_PER_REQUEST_FOR_SUMMARISATION = 4096",
        "from sklearn.feature_extraction.text import TfidfVectorizer  # sk-learn",
        "kubectl rollout restart deployment/sk-payments-worker-eu-west-1-blue",
        "The task-scheduling-service-for-the-whole-team runs hourly.",
        "def test_password_reset_token_expires_after_thirty_minutes_even_if_unused():",
        "ghs_total_count = sum(repo.ghs_stars for repo in repos)",
        "AKIA_PREFIX_LENGTH = 4  # AWS access key ids start with AKIA",
        "secretsmanager_rotation_lambda_arn_output_value_for_prod",
        "jwt_access_token_lifetime_minutes_default_value = 15",
        "useApiKeyAuthenticationMiddlewareWithRetryPolicyAndCircuitBreaker()",
        "resource \"aws_iam_access_key\" \"ci_deploy_user_key_rotation_2024\" {}",
        "xoxb_token_scopes_required_for_posting_messages = [\"chat:write\"]",
    ))


def _cjk_prose(rng: random.Random) -> str:
    return _pick(rng, (
        "令牌桶算法用于限流，每个 API 密钥每分钟最多 100 次请求。",
        "密码至少 12 位，包含大小写字母和数字，使用 argon2id 存储。",
        "访问令牌一小时后过期，刷新令牌有效期为 30 天。",
        "不要把私钥提交到仓库，应放在密钥管理服务里。",
        "请在环境变量 OPENAI_API_KEY 中配置密钥，不要写进代码。",
        "アクセストークンの有効期限は1時間です。リフレッシュトークンで更新してください。",
        "パスワードは12文字以上で、定期的な変更は不要です。",
        "APIキーはシークレットマネージャーに保存し、リポジトリには絶対にコミットしないこと。",
        "秘密鍵が漏洩した場合は、証明書を失効させて新しい鍵ペアを生成する。",
        "JWT 由三部分组成：头部、载荷和签名，用点号分隔。",
        "数据库连接串里不要带密码，改用 IAM 认证。",
        "这次发布修复了密码重置邮件的问题，版本号 2.14.3。",
    ))


def _url_query(rng: random.Random) -> str:
    n = rng.randint(1, 500)
    return _pick(rng, (
        "https://www.google.com/search?q=rotate+api+key+github&hl=en",
        "https://shop.acme.io/products?page={n}&sort=price_desc&utm_source=newsletter&utm_medium=email",
        "https://github.com/acme/api/pulls?q=is%3Apr+is%3Aopen+label%3Asecurity",
        "https://docs.acme.io/auth/tokens#refresh-tokens",
        "https://api.acme.io/v2/items?limit=50&offset={n}&fields=id,name,updated_at",
        "GET /search?query=password+reset&lang=en&page={n} 200",
        "https://console.cloud.google.com/apis/credentials?project=acme-prod-{n}",
        "https://example.com/callback?state=xyz&code_challenge_method=S256",
        "https://maps.example.org/tiles/{n}/12/2048.png?style=dark",
        "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t={n}s",
    )).format(n=n)


def _public_material(rng: random.Random) -> str:
    body = "\n".join(_s(rng, B64, 64) for _ in range(4))
    return _pick(rng, (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + _s(rng, B64, 43) + " dana@laptop",
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQ" + _s(rng, B64, 300) + " ci@acme",
        "-----BEGIN PUBLIC KEY-----\n" + body + "\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\n" + body + "\n-----END CERTIFICATE-----",
        "STRIPE_PUBLISHABLE_KEY=pk_live_" + "51" + _s(rng, B62, 97),
        "Stripe.js is initialised with pk_test_" + "51" + _s(rng, B62, 97) + " in the browser.",
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + body + "\n-----END PGP PUBLIC KEY BLOCK-----",
        "gpg fingerprint: " + " ".join(_s(rng, "0123456789ABCDEF", 4) for _ in range(10)),
    ))


def _token_counts(rng: random.Random) -> str:
    a, b = rng.randint(100, 200000), rng.randint(10, 8000)
    return _pick(rng, (
        "usage: prompt_tokens={a} completion_tokens={b} total_tokens={c}",
        "{{\"max_tokens\": {b}, \"temperature\": 0.2}}",
        "max_tokens=4096 for the summariser prompt",
        "The model has a context of {a} tokens; we keep {b} for the answer.",
        "input_tokens: {a}\noutput_tokens: {b}",
        "Token usage this month: {a} (budget 5000000).",
        "tokens: {a}",
        "本次请求消耗 {a} 个 token。",
    )).format(a=a, b=b, c=a + b)


NEGATIVES: dict[str, Callable[[random.Random], str]] = {
    "git_sha": _git_sha,
    "uuid": _uuid,
    "base64_blob": _base64_blob,
    "hash": _hash,
    "placeholder": _placeholder,
    "connection_string_no_password": _connection_string_no_password,
    "docs_prose": _docs_prose,
    "env_var_code": _env_var_code,
    "css_colour": _css_colour,
    "version_string": _version_string,
    "long_identifier": _long_identifier,
    "cjk_prose": _cjk_prose,
    "url_query": _url_query,
    "public_material": _public_material,
    "token_counts": _token_counts,
}


def corpus(seed: int = SEED, per_category: int = PER_CATEGORY) -> list[Sample]:
    """Every sample, positives then negatives; deterministic for a given seed."""
    rng = random.Random(seed)
    samples: list[Sample] = []
    for secret, makers in ((True, POSITIVES), (False, NEGATIVES)):
        for name, make in makers.items():
            texts: dict[str, None] = {}  # distinct texts in order: a category of fixed templates yields fewer
            for _ in range(per_category * 10):
                texts[make(rng)] = None
                if len(texts) == per_category:
                    break
            samples += [Sample(name, text, secret) for text in texts]
    return samples


@dataclass(frozen=True)
class CategoryScore:
    category: str
    secret: bool  # a positive category (rate = detection) or a negative one (rate = false positives)
    total: int
    flagged: int

    @property
    def rate(self) -> float:
        return self.flagged / self.total


def score(detect: Callable[[str], object], samples: list[Sample]) -> list[CategoryScore]:
    """Per category: how many samples ``detect`` flags (returns something other than None)."""
    counts: dict[tuple[str, bool], list[int]] = {}
    for sample in samples:
        entry = counts.setdefault((sample.category, sample.secret), [0, 0])
        entry[0] += 1
        entry[1] += detect(sample.text) is not None
    return [CategoryScore(cat, secret, total, flagged) for (cat, secret), (total, flagged) in counts.items()]


def overall(scores: list[CategoryScore], secret: bool) -> float:
    """Detection rate (secret=True) or false-positive rate (secret=False) over every sample of that kind."""
    chosen = [s for s in scores if s.secret is secret]
    return sum(s.flagged for s in chosen) / sum(s.total for s in chosen)
