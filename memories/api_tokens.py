"""Who is calling: the master bearer token (everything) or a scoped API token.

The principal a token grants (bhgbrain_site.registry.Principal) is checked by the registry
for every operation, whichever transport carried the call.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.calls import FULL_ACCESS, Principal
from bhgbrain_site.core.contracts import is_namespace
from bhgbrain_site.core.errors import InvalidInput
from memories import funnel
from memories.models import ApiToken

TOKEN_PREFIX = "bhg_"
_any_tokens_cache: tuple[float, bool] = (0.0, False)
TOKENS_CACHE_S = 5.0  # how long the "any scoped token?" answer is trusted


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def master_token() -> str | None:
    return os.environ.get(settings.BHGBRAIN.transport.http.bearer_token_env) or None


def scoped_tokens_exist() -> bool:
    """Cached 5 s: whether any scoped token was ever created (then auth is always required).

    Revoked ones count: revoking the last token must not reopen the server to every local
    caller; access then needs the master token."""
    global _any_tokens_cache
    checked, value = _any_tokens_cache
    if time.monotonic() - checked > TOKENS_CACHE_S:
        value = ApiToken.objects.exists()
        _any_tokens_cache = (time.monotonic(), value)
    return value


def known_open() -> bool:
    """True when no token is configured and the cached check (at most 5 s old) found no scoped
    token: the caller has full access, and finding that out needs no query (safe on an event loop)."""
    checked, value = _any_tokens_cache
    return not value and time.monotonic() - checked <= TOKENS_CACHE_S and master_token() is None


def auth_required() -> bool:
    return master_token() is not None or scoped_tokens_exist()


def principal_for(authorization: str | None) -> Principal | None:
    """The principal of an Authorization header; None when it grants nothing."""
    if not auth_required():
        return FULL_ACCESS
    scheme, _, supplied = (authorization or "").partition(" ")
    supplied = supplied.strip()
    if scheme.lower() != "bearer" or not supplied:
        return None
    master = master_token()
    if master and hmac.compare_digest(supplied.encode(), master.encode()):
        return FULL_ACCESS
    row = ApiToken.objects.filter(token_hash=hash_token(supplied), revoked=False).first()
    if row is None:
        return None
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    return Principal(name=row.name, namespaces=frozenset(row.namespaces), read_only=row.read_only,
                     write_rate_per_minute=row.write_rate_per_minute, key=f"token:{row.pk}")


def _check_namespaces(namespaces: list[str]) -> None:
    if not namespaces:
        raise InvalidInput("namespaces: a scoped token needs at least one namespace", field="namespaces")
    for namespace in namespaces:
        if not is_namespace(namespace):
            raise InvalidInput(f"namespaces: {namespace[:50]!r} is not a valid namespace", field="namespaces")


def _check_rate(write_rate_per_minute: int | None) -> None:
    if write_rate_per_minute is not None and write_rate_per_minute < 1:
        raise InvalidInput("write_rate_per_minute: at least 1 (or none: no limit)", field="write_rate_per_minute")


def token_create(*, name: str, namespaces: list[str], read_only: bool, actor: str = "system",
                 write_rate_per_minute: int | None = None) -> tuple[ApiToken, str]:
    """Create a scoped token (``write_rate_per_minute``: its writing calls a minute, None: no
    limit); the plain token is returned once and only its hash is stored."""
    _check_namespaces(namespaces)
    _check_rate(write_rate_per_minute)
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        row = ApiToken.objects.create(
            name=name, token_hash=hash_token(plain), prefix=plain[:10], namespaces=sorted(set(namespaces)), read_only=read_only,
            write_rate_per_minute=write_rate_per_minute,
        )
        _audit_token("TOKEN_CREATE", row, actor)
    reset_token_cache()
    return row, plain


def token_revoke(*, prefix: str, actor: str) -> int:
    """Revoke every live token with this prefix (as `token list` shows it); audited."""
    with transaction.atomic():
        rows = list(ApiToken.objects.select_for_update().filter(prefix=prefix, revoked=False))
        for row in rows:
            row.revoked = True
            row.save(update_fields=["revoked"])
            _audit_token("TOKEN_REVOKE", row, actor)
    reset_token_cache()
    return len(rows)


def token_change(*, token_id: int, name: str, namespaces: list[str], read_only: bool, revoked: bool,
                 actor: str, write_rate_per_minute: int | None = None) -> ApiToken:
    """A curator's edit of a token (the admin): name, namespaces, read-only, write rate, or
    revoking it; audited. A revoked token stays revoked: a new one is created instead."""
    _check_namespaces(namespaces)
    _check_rate(write_rate_per_minute)
    with transaction.atomic():
        row = ApiToken.objects.select_for_update().get(pk=token_id)
        if row.revoked and not revoked:
            raise InvalidInput("revoked: a revoked token stays revoked; create a new one", field="revoked")
        revoking = revoked and not row.revoked
        row.name, row.namespaces, row.read_only, row.revoked = name, sorted(set(namespaces)), read_only, revoked
        row.write_rate_per_minute = write_rate_per_minute
        row.save(update_fields=["name", "namespaces", "read_only", "revoked", "write_rate_per_minute"])
        _audit_token("TOKEN_REVOKE" if revoking else "TOKEN_CHANGE", row, actor)
    reset_token_cache()
    return row


def tokens_list() -> list[dict[str, Any]]:
    """Every token, oldest first (never its value)."""
    return [
        {"id": row.pk, "name": row.name, "prefix": row.prefix, "namespaces": list(row.namespaces),
         "read_only": row.read_only, "revoked": row.revoked, "write_rate_per_minute": row.write_rate_per_minute}
        for row in ApiToken.objects.order_by("created_at")
    ]


def reset_token_cache() -> None:
    """Forget the cached "any token exists" answer (after a change, and in tests)."""
    global _any_tokens_cache
    _any_tokens_cache = (0.0, False)


def _audit_token(operation: str, row: ApiToken, actor: str) -> None:
    funnel.record_audit(operation=operation, actor=actor, namespace="*",
                        details={"name": row.name, "prefix": row.prefix, "namespaces": row.namespaces, "read_only": row.read_only,
                                 "write_rate_per_minute": row.write_rate_per_minute})
