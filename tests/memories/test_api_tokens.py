"""Scoped tokens: creation and revocation are audited; the plain value is never stored."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from memories import api_tokens
from memories.models import AuditLog

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    api_tokens.reset_token_cache()
    yield
    api_tokens.reset_token_cache()


def test_token_create_and_revoke_are_audited() -> None:
    row, plain = api_tokens.token_create(name="ci-agent", namespaces=["alice", "alice"], read_only=True, actor="admin:ops")
    created = AuditLog.objects.get(operation="TOKEN_CREATE")
    assert created.client_id == "admin:ops" and created.details == {
        "name": "ci-agent", "prefix": plain[:10], "namespaces": ["alice"], "read_only": True, "write_rate_per_minute": None}
    assert plain not in json.dumps(created.details) and plain not in row.token_hash
    principal = api_tokens.principal_for(f"Bearer {plain}")
    assert principal is not None and principal.namespaces == frozenset({"alice"}) and principal.read_only
    assert api_tokens.token_revoke(prefix=row.prefix, actor="cli") == 1
    assert AuditLog.objects.get(operation="TOKEN_REVOKE").client_id == "cli"
    assert api_tokens.principal_for(f"Bearer {plain}") is None  # revoked ...
    assert api_tokens.principal_for(None) is None  # ... and the server does not fall back to open access
    assert api_tokens.token_revoke(prefix=row.prefix, actor="cli") == 0  # already revoked: nothing, no second row
    assert AuditLog.objects.filter(operation="TOKEN_REVOKE").count() == 1


def test_token_change_is_audited_takes_effect_and_never_unrevokes() -> None:
    from bhgbrain_site.core.errors import InvalidInput

    row, plain = api_tokens.token_create(name="ci-agent", namespaces=["alice"], read_only=False, actor="cli")
    api_tokens.token_change(token_id=row.pk, name="ci", namespaces=["alice", "bob"], read_only=True, revoked=False,
                            actor="admin:ops")
    principal = api_tokens.principal_for(f"Bearer {plain}")
    assert principal is not None and principal.namespaces == frozenset({"alice", "bob"}) and principal.read_only
    assert AuditLog.objects.get(operation="TOKEN_CHANGE").details["namespaces"] == ["alice", "bob"]
    with pytest.raises(InvalidInput, match="namespace"):
        api_tokens.token_change(token_id=row.pk, name="ci", namespaces=["not a namespace"], read_only=True,
                                revoked=False, actor="admin:ops")
    api_tokens.token_change(token_id=row.pk, name="ci", namespaces=["alice"], read_only=True, revoked=True, actor="admin:ops")
    assert api_tokens.principal_for(f"Bearer {plain}") is None
    assert AuditLog.objects.get(operation="TOKEN_REVOKE").client_id == "admin:ops"
    with pytest.raises(InvalidInput, match="stays revoked"):
        api_tokens.token_change(token_id=row.pk, name="ci", namespaces=["alice"], read_only=True, revoked=False,
                                actor="admin:ops")
    assert api_tokens.principal_for(f"Bearer {plain}") is None
