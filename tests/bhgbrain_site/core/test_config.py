"""Config: creation with every default, resolution order, validation naming the key, device id."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bhgbrain_site.core.config import ConfigError, load_config, parse_config, resolve_config_path, sanitize_hostname

SEED_KEYS = {
    "data_dir", "device.id", "embedding.provider", "embedding.model", "embedding.api_key_env",
    "embedding.dimensions", "qdrant.mode", "qdrant.embedded_path", "qdrant.external_url", "qdrant.api_key_env",
    "transport.http.enabled", "transport.http.host", "transport.http.port", "transport.http.bearer_token_env",
    "transport.stdio.enabled", "defaults.namespace", "defaults.collection", "defaults.recall_limit",
    "defaults.min_score", "defaults.auto_inject_limit", "defaults.max_response_chars",
    "retention.decay_after_days", "retention.max_db_size_gb", "retention.max_memories",
    "retention.warn_at_percent", "retention.tier_ttl.T0", "retention.tier_ttl.T1", "retention.tier_ttl.T2",
    "retention.tier_ttl.T3", "retention.tier_budgets.T0", "retention.tier_budgets.T1",
    "retention.tier_budgets.T2", "retention.tier_budgets.T3", "retention.auto_promote_access_threshold",
    "retention.sliding_window_enabled", "retention.archive_before_delete", "retention.cleanup_schedule",
    "retention.pre_expiry_warning_days", "retention.compaction_deleted_threshold",
    "deduplication.enabled", "deduplication.similarity_threshold", "search.hybrid_weights.semantic",
    "search.hybrid_weights.fulltext", "security.require_loopback_http", "security.allow_unauthenticated_http",
    "security.log_redaction", "security.rate_limit_rpm", "security.max_request_size_bytes",
    "auto_inject.max_chars", "auto_inject.max_tokens", "observability.metrics_enabled",
    "observability.structured_logging", "observability.log_level", "pipeline.fallback_to_threshold_dedup",
}
# The seed's keys that nothing reads: accepted in an old config (one warning), never written.
IGNORED_SEED_KEYS = {"pipeline.extraction_enabled", "pipeline.extraction_model", "pipeline.extraction_model_env",
                     "auto_summarize"}


def _flatten(doc: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_first_run_creates_the_file_with_every_seed_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BHGBRAIN_DEVICE_ID", "laptop-1")
    path = tmp_path / "sub" / "config.json"
    config, resolved = load_config(str(path))
    written = _flatten(json.loads(path.read_text()))
    assert resolved == path
    assert SEED_KEYS <= set(written)
    assert not IGNORED_SEED_KEYS & set(written)
    assert written["vector_index"] == "embedded"
    assert written["embedding.provider"] == "local"
    assert written["embedding.dimensions"] == 384
    assert written["retention.tier_ttl.T1"] == 365 and written["retention.tier_budgets.T0"] is None
    assert written["device.id"] == "laptop-1"
    assert config.transport.http.port == 3721


def test_device_id_order_and_persistence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.json"
    monkeypatch.delenv("BHGBRAIN_DEVICE_ID", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "My Laptop.LOCAL!")
    config, _ = load_config(str(path))
    assert config.device.id == "my-laptop.local"
    monkeypatch.setenv("BHGBRAIN_DEVICE_ID", "from-env")
    config, _ = load_config(str(path))
    assert config.device.id == "my-laptop.local"  # persisted on first run: stable across hostname/env changes
    path.write_text(json.dumps({"device": {"id": None}}))
    assert load_config(str(path))[0].device.id == "from-env"
    assert json.loads(path.read_text())["device"]["id"] == "from-env"


def test_sanitize_hostname() -> None:
    assert sanitize_hostname("CPC-Kevin 98F91") == "cpc-kevin-98f91"
    assert sanitize_hostname("!!!") == "bhgbrain-device"
    assert len(sanitize_hostname("x" * 100)) == 64


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BHGBRAIN_CONFIG", str(tmp_path / "env.json"))
    assert resolve_config_path(str(tmp_path / "cli.json")) == tmp_path / "cli.json"
    assert resolve_config_path() == tmp_path / "env.json"
    monkeypatch.delenv("BHGBRAIN_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_config_path() == tmp_path / ".bhgbrain" / "config.json"


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"retention": {"tier_ttl": {"T1": -5}}}, "retention.tier_ttl"),
        ({"defaults": {"min_score": 1.5}}, "defaults.min_score"),
        ({"defaults": {"namespace": "bad namespace!"}}, "defaults.namespace"),
        ({"retention": {"cleanup_schedule": "every day"}}, "retention.cleanup_schedule"),
        ({"search": {"hybrid_weights": {"semantic": 0.7, "fulltext": 0.7}}}, "search.hybrid_weights"),
        ({"embedding": {"provider": "cohere"}}, "embedding.provider"),
        ({"transport": {"http": {"port": 70000}}}, "transport.http.port"),
        ({"security": {"rate_limit_rpm": "fast"}}, "security.rate_limit_rpm"),
        ({"observability": {"log_level": "verbose"}}, "observability.log_level"),
        ({"device": {"id": "has space"}}, "device.id"),
        ({"vector_index": "faiss"}, "vector_index"),
        ({"retention": {"unknown_key": 1}}, "retention.unknown_key"),
        ({"surprise": True}, "surprise"),
        ({"namespace_defaults": {"max_memories": 0}}, "namespace_defaults.max_memories"),
        ({"namespace_defaults": {"on_quota_exceeded": "drop"}}, "namespace_defaults.on_quota_exceeded"),
        ({"namespaces": {"alpha": {"tier_budgets": {"T2": -1}}}}, "namespaces.alpha.tier_budgets"),
        ({"namespaces": {"alpha": {"max_memory": 5}}}, "namespaces.alpha.max_memory"),
        ({"namespaces": {"not a namespace": {"max_memories": 5}}}, "namespaces"),
    ],
)
def test_invalid_values_name_the_key(tmp_path: Path, document: dict, key: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_config(document, tmp_path / "config.json")
    assert f"config key '{key}" in str(excinfo.value)


def test_invalid_json_and_non_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="JSON object"):
        parse_config([1, 2], path)


def test_cli_refuses_an_invalid_config_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"defaults": {"recall_limit": 99}}))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    proc = subprocess.run(
        [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={path}", "health"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 2
    assert "config key 'defaults.recall_limit'" in proc.stderr
    assert proc.stdout == ""


def test_an_old_config_with_keys_nothing_reads_loads_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.json"
    old = {"device": {"id": "old-1"}, "auto_summarize": False, "deduplication": {"enabled": False},
           "pipeline": {"extraction_enabled": False, "extraction_model": "x", "extraction_model_env": "Y",
                        "fallback_to_threshold_dedup": False}}
    path.write_text(json.dumps(old))
    with caplog.at_level("WARNING", logger="bhgbrain.config"):
        config, _ = load_config(str(path))
    warnings = [r for r in caplog.records if r.name == "bhgbrain.config"]
    assert len(warnings) == 1
    assert all(key in warnings[0].getMessage() for key in IGNORED_SEED_KEYS)
    assert config.pipeline.fallback_to_threshold_dedup is False and config.deduplication.enabled is False
    assert json.loads(path.read_text()) == old  # the user's file is left as it was


def test_a_config_without_ignored_keys_loads_without_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"device": {"id": "new-1"}, "pipeline": {"fallback_to_threshold_dedup": True}}))
    with caplog.at_level("WARNING", logger="bhgbrain.config"):
        load_config(str(path))
    assert not [r for r in caplog.records if r.name == "bhgbrain.config"]


def test_an_unknown_key_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pipeline.extraction_typo"):
        parse_config({"pipeline": {"extraction_typo": True}}, tmp_path / "config.json")


def test_namespace_quotas_default_to_none_and_an_entry_stands_alone(tmp_path: Path) -> None:
    old = parse_config({"retention": {"max_memories": 1000}}, tmp_path / "config.json")  # a config from before quotas
    assert old.namespaces == {} and old.namespace_defaults.max_memories is None
    assert old.namespace_defaults.on_quota_exceeded == "reject"
    assert all(getattr(old.namespace_defaults.tier_budgets, t) is None for t in ("T0", "T1", "T2", "T3"))
    config = parse_config({"namespace_defaults": {"max_memories": 10, "on_quota_exceeded": "trim"},
                           "namespaces": {"team/alpha": {"tier_budgets": {"T3": 2}}}}, tmp_path / "config.json")
    entry = config.namespaces["team/alpha"]
    assert (entry.max_memories, entry.tier_budgets.T3, entry.on_quota_exceeded) == (None, 2, "reject")
