"""Content normalisation, secret detection, summary and checksum (seed: 内容规范化)."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from bhgbrain_site.core.contracts import SUMMARY_MAX
from bhgbrain_site.core.errors import InvalidInput

SECRET_MESSAGE = "Content appears to contain credentials or secrets. Memory rejected for safety."

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CRLF_RE = re.compile(r"\r+\n")
_TRAILING_WS_RE = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUN_RE = re.compile(r"\n{3,}")

# --------------------------------------------------------------------------- secret detection
# Each rule is a provider's documented credential format, or a credential assigned to a name that
# says what it is (api_key=, password:, Authorization:, a URL's user:password@). A match counts
# only when its value passes the rule's check: placeholders (sk-..., <your-key>, xxxxx, ****,
# AWS's documented ...EXAMPLE ids) and references to a secret kept elsewhere (${VAR},
# os.environ["X"], settings.KEY, a file path) are not credentials. docs/security.md lists what
# is detected and what is not, with the measured rates (bench/secret_detection.py).

_PLACEHOLDER_RE = re.compile(
    r"example|placeholder|redacted|change[_-]?me|replace[_-]?(?:me|with)|(?<![a-z])your(?![a-z])"
    r"|x{5,}|\*{3,}|\.\.\.|…|<[^>]*>|^\W*$",
    re.IGNORECASE,
)
# The value names a secret instead of holding one: a template or variable (${X}, $X, %(x)s, %X%,
# {{ x }}, <x>, [x], #colour), a keyword, a file path, or a bare name that is itself a secret's
# name (api_key=api_key, password=db_password).
_REFERENCE_RE = re.compile(
    r"""\$[{(] | \$[A-Za-z_]\w*$ | %\( | %\w+%$ | [{<\[(`] | \#[0-9a-f]{3,8}$
    | (?:none|null|nil|true|false|undefined|string|bytes|optional|required|empty)$
    | (?:~|\.\.?)?/[a-z]
    | [A-Za-z_]*(?:key|token|secret|pass|pwd|credential)[A-Za-z_]*$""",
    re.IGNORECASE | re.VERBOSE,
)
# Code names a secret too: unquoted, a call or subscript (os.getenv(, env::var(, cfg[); quoted or
# not, a dotted name made of words (self.token, process.env.KEY, "color.accent"), not of random
# characters (ya29.a0AfH6SM, 'dQimjlSOt.foVb').
_CALL_RE = re.compile(r"[A-Za-z_]\w*(?:(?:\.|::|->)[A-Za-z_]\w*)*[(\[]")
_WORD = r"(?:[a-z]+(?:_[a-z]+)*|[A-Z][A-Z_]*|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*)"
_DOTTED_NAME_RE = re.compile(rf"{_WORD}(?:(?:\.|::|->){_WORD})+")
_NUMBER_LIKE_RE = re.compile(r"[vV]?[\d.:/+\-TZ]+")  # counts, ports, dates, versions
_IDENTIFIER_RE = re.compile(r"[A-Za-z_]+")
_NOT_A_SECRET_PREFIX_RE = re.compile(r"(?:page|next|continuation|sync|cursor|resume|max|num)[_-]?$", re.IGNORECASE)
_TEMPLATE_PASSWORDS = frozenset({"password", "pass", "passwd", "pwd", "secret", "token"})

# Names of credentials, lower case (the pattern runs on the ASCII-lower-cased text), as a trie so
# that the scan skips quickly over text that cannot start one.
_KEY_NAMES = (
    r"(?:a(?:pi[_-]?key|pikey|ccess[_-]?(?:key|token)|uth[_-]?token)|s(?:ecret(?:[_-]?key)?|ession[_-]?token)|token"
    r"|p(?:ass(?:word|wd|phrase)?|wd|gpassword|rivate[_-]?key)|c(?:lient[_-]?secret|redentials?)|refresh[_-]?token"
    r"|bearer[_-]?token|encryption[_-]?key|master[_-]?key|signing[_-]?key|account[_-]?key|shared[_-]?access[_-]?key)"
)
_VALUE = r"(?P<q>[\"'`]?)(?P<v>[^\s\"'`,;):][^\s\"'`,;)]{3,})"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _value(match: re.Match[str], text: str) -> str:
    return text[match.start("v") : match.end("v")]  # from the original text: the folded one lost its case


def _real(match: re.Match[str], text: str) -> bool:
    return not _PLACEHOLDER_RE.search(_value(match, text))


def _always(match: re.Match[str], text: str) -> bool:
    return True


def _letters_and_digits(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _random_token(match: re.Match[str], text: str) -> bool:
    """Machine-made: two of upper case, lower case and digits (a random 40-character key may lack digits)."""
    value = _value(match, text)
    classes = any(c.isupper() for c in value) + any(c.islower() for c in value) + any(c.isdigit() for c in value)
    return _real(match, text) and classes >= 2


def _literal_value(match: re.Match[str], text: str) -> bool:
    """A value given to a secret's name that is neither a placeholder, a reference nor a number."""
    # NAME==x and "if x == y:": the operator's second "=" and trailing punctuation are not the value
    raw, start = _value(match, text), match.start()
    value = raw.removeprefix("=").rstrip(":.")
    if start and text[start - 1].isascii() and (text[start - 1].isalnum()):
        return False  # inside a longer word: OLDPWD=, bypass=
    if _PLACEHOLDER_RE.search(raw) or _REFERENCE_RE.match(value) or _NUMBER_LIKE_RE.fullmatch(value):
        return False
    if (not match["q"] and _CALL_RE.match(value)) or _DOTTED_NAME_RE.fullmatch(value):
        return False
    if _NOT_A_SECRET_PREFIX_RE.search(text, max(0, start - 16), start):
        return False  # page_token=, next_token=, max_token=: not credentials
    # name=value among a call's arguments, unquoted and without digits: a variable, not a literal
    following = text[match.end() : match.end() + 1]
    return not (not match["q"] and following in {",", ")"} and _IDENTIFIER_RE.fullmatch(value))


def _assigned(match: re.Match[str], text: str) -> bool:
    """name=value is a literal; name: value (YAML, JSON, prose) and --name value must also be quoted
    or look machine-made (letters and digits), since prose puts words after a colon."""
    if not _literal_value(match, text):
        return False
    if match["op"] and "=" in match["op"]:
        return True
    value = _value(match, text)
    return bool(match["q"]) or (len(value) >= 6 and _letters_and_digits(value))


def _url_password(match: re.Match[str], text: str) -> bool:
    return _value(match, text).lower() not in _TEMPLATE_PASSWORDS and _literal_value(match, text)


def _option_password(match: re.Match[str], text: str) -> bool:
    """curl -u user:password; docker's -u uid:gid and -u www-data:www-data are not passwords."""
    return _url_password(match, text) and _letters_and_digits(_value(match, text))


@dataclass(frozen=True)
class SecretRule:
    name: str
    hints: tuple[str, ...]  # the text must contain one of them, or the pattern is skipped
    fold: bool  # hints and pattern are lower case and run on the ASCII-lower-cased text
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str], str], bool]  # (match, original text) -> a real credential?


def _rule(name: str, hints: tuple[str, ...], pattern: str, check: Callable[[re.Match[str], str], bool] = _real,
          *, fold: bool = False) -> SecretRule:
    return SecretRule(name, hints, fold, re.compile(pattern), check)


SECRET_RULES: tuple[SecretRule, ...] = (
    _rule("pem_private_key", ("PRIVATE KEY", "PuTTY-User-Key-File"),
          r"(?P<v>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d)", _always),
    _rule("aws_access_key_id", ("AKIA", "ASIA", "ABIA", "ACCA"),
          r"(?<![A-Za-z0-9])(?P<v>(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})(?![A-Za-z0-9])"),
    _rule("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
          r"(?<![A-Za-z0-9])(?P<v>gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    _rule("anthropic_key", ("sk-ant-",), r"(?<![A-Za-z0-9_-])sk-ant-[a-z]+\d\d-(?P<v>[A-Za-z0-9_-]{20,})"),
    _rule("openai_key", ("sk-",),
          r"(?<![A-Za-z0-9_-])sk-(?:proj-|svcacct-|admin-)?(?P<v>[A-Za-z0-9_-]*?[A-Za-z0-9]{20}[A-Za-z0-9_-]*)"),
    _rule("stripe_key", ("_live_", "_test_", "whsec_"),
          r"(?<![A-Za-z0-9])(?P<v>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}|whsec_[A-Za-z0-9+/=]{24,})"),
    _rule("slack_token", ("xox", "xapp-"),
          r"(?<![A-Za-z0-9])(?P<v>(?:xox[abposre]|xoxe\.xox[bp]|xapp)-(?=[A-Za-z0-9-]*\d)[A-Za-z0-9-]{10,})"),
    _rule("slack_webhook", ("hooks.slack.com",), r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/-]{20,})"),
    _rule("google_credential", ("AIza", "GOCSPX-", "ya29."),
          r"(?<![A-Za-z0-9_-])(?P<v>AIza[0-9A-Za-z_-]{35}|GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[0-9A-Za-z_-]{20,})"),
    _rule("other_provider_token", ("glpat-", "npm_", "pypi-", "hf_", "SG."),
          r"(?<![A-Za-z0-9])(?P<v>glpat-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_-]{50,}"
          r"|hf_[A-Za-z0-9]{34}|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})"),
    _rule("jwt", ("eyJ",), r"(?<![A-Za-z0-9_-])(?P<v>eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,})"),
    _rule("url_password", ("://",),
          r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"<>{}]*:(?P<q>)(?P<v>[^\s/@'\"<>]+)@(?=[A-Za-z0-9\[])",
          _url_password),
    _rule("aws_secret_access_key", ("secret",),
          r"(?:secret[_\- ]?access[_\- ]?key|aws[_\- ]?secret(?:[_\- ]?key)?)[^a-z0-9/+\n]{1,8}(?:(?:is|was)\s+)?"
          r"(?P<v>[a-z0-9/+]{40})(?![a-z0-9/+=])", _random_token, fold=True),
    _rule("authorization_header", ("authorization", "bearer"),
          r"(?:authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|bot|apikey)\s+)?|(?<![a-z0-9])bearer\s+)"
          r"(?P<v>[a-z0-9._~+/-]{16,}=*)", _random_token, fold=True),
    _rule("assignment", ("key", "secret", "token", "pass", "pwd", "credential"),
          rf"(?:--{_KEY_NAMES}[ \t]+|{_KEY_NAMES}[\"']?[ \t]*(?P<op>=>|:?=|[:：]|[ \t](?:is|was)[ \t]*:?))[ \t]*{_VALUE}",
          _assigned, fold=True),
    _rule("basic_auth_option", ("-u", "--user"),
          r"(?<![a-z0-9-])(?:-u|--user)[ \t=]+[\"']?[^\s:\"'$]+:(?P<q>)(?P<v>[^\s\"'@]{4,})", _option_password),
    _rule("telegram_bot_token", (":AA",), r"(?<![0-9])\d{8,10}:(?P<v>AA[A-Za-z0-9_-]{33})(?![A-Za-z0-9_-])"),
    _rule("cjk_labelled_secret", ("密码", "密碼", "口令", "密钥", "密鑰", "令牌", "パスワード", "暗証番号", "トークン", "キー", "비밀번호"),
          r"(?:密码|密碼|口令|密钥|密鑰|令牌|パスワード|暗証番号|トークン|キー|비밀번호)[ \t]*(?:[:：=]|是|为|は)[ \t]*"
          r"(?P<q>)(?P<v>[!-~]{6,})", _random_token),
)


def normalize_content(content: str) -> str:
    """The seed's five steps: controls, CRLF, trailing blanks, blank runs, trim."""
    text = _CONTROL_RE.sub("", content)
    text = _CRLF_RE.sub("\n", text)  # \r+\n, so that normalising twice changes nothing
    text = _TRAILING_WS_RE.sub("", text)
    text = _BLANK_RUN_RE.sub("\n\n", text)
    return text.strip()


def _rule_finds(rule: SecretRule, haystack: str, text: str) -> bool:
    pos = 0
    while match := rule.pattern.search(haystack, pos):
        if rule.check(match, text):
            return True
        # a refused match may hide another inside it ("token": "auth_token = q1w2e3r4"): go on from its value
        pos = max(match.start() + 1, match.start("v"))
    return False


def find_secret(text: str) -> str | None:
    """Name of the first rule that finds a real credential in the text, or None.

    A rule runs only when one of its literal hints is in the text, so ordinary prose costs a
    few substring searches (this runs on every write)."""
    folded = text.lower()
    if len(folded) != len(text):  # a few non-ASCII letters lower-case to two characters: keep the indices
        folded = text.translate(_ASCII_LOWER)
    for rule in SECRET_RULES:
        haystack = folded if rule.fold else text
        for hint in rule.hints:
            if hint in haystack:
                if _rule_finds(rule, haystack, text):
                    return rule.name
                break
    return None


def reject_secrets(text: str) -> None:
    """Raise INVALID_INPUT (without echoing anything) when text holds a credential."""
    if find_secret(text) is not None:
        raise InvalidInput(SECRET_MESSAGE, field="content")


def make_summary(normalized: str) -> str:
    """First line, at most SUMMARY_MAX (120) chars (truncated with '...')."""
    first_line = normalized.split("\n", 1)[0].strip()
    if len(first_line) <= SUMMARY_MAX:
        return first_line
    return first_line[: SUMMARY_MAX - 3].rstrip() + "..."


def checksum(normalized: str) -> str:
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()
