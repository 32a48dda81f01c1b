"""Who is calling: the master bearer token (everything) or a scoped API token."""
from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from bhgbrain_site.errors import AuthRequired, InvalidInput
from mcp_bridge.models import ApiToken

TOKEN_PREFIX = "bhg_"
_any_tokens_cache: tuple[float, bool] = (0.0, False)


@dataclass(frozen=True)
class Principal:
    name: str
    namespaces: frozenset[str] | None  # None = every namespace
    read_only: bool = False

    def default_namespace(self, configured: str) -> str:
        """The configured default, unless this token may not use it: then its first namespace."""
        if self.namespaces is None or configured in self.namespaces or not self.namespaces:
            return configured
        return sorted(self.namespaces)[0]

    def check(self, namespace: str, *, writes: bool) -> None:
        if self.namespaces is not None and namespace not in self.namespaces:
            raise AuthRequired(f'This token may not access namespace "{namespace}"')
        if writes and self.read_only:
            raise AuthRequired("This token is read-only")


FULL_ACCESS = Principal(name="full", namespaces=None)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def master_token() -> str | None:
    import os

    return os.environ.get(settings.BHGBRAIN.transport.http.bearer_token_env) or None


def scoped_tokens_exist() -> bool:
    """Cached 5 s: whether any scoped token was ever created (then auth is always required).

    Revoked ones count: revoking the last token must not reopen the server to every local
    caller; access then needs the master token."""
    global _any_tokens_cache
    checked, value = _any_tokens_cache
    if time.monotonic() - checked > 5:
        value = ApiToken.objects.exists()
        _any_tokens_cache = (time.monotonic(), value)
    return value


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
    return Principal(name=row.name, namespaces=frozenset(row.namespaces), read_only=row.read_only)


def token_create(*, name: str, namespaces: list[str], read_only: bool, actor: str = "system") -> tuple[ApiToken, str]:
    """Create a scoped token; the plain token is returned once and only its hash is stored."""
    global _any_tokens_cache
    import re

    if not namespaces:
        raise InvalidInput("namespaces: a scoped token needs at least one namespace")
    for namespace in namespaces:
        if not re.match(r"^[a-zA-Z0-9/-]{1,200}$", namespace):
            raise InvalidInput(f"namespaces: {namespace[:50]!r} is not a valid namespace")
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        row = ApiToken.objects.create(
            name=name, token_hash=hash_token(plain), prefix=plain[:10], namespaces=sorted(set(namespaces)), read_only=read_only
        )
        _audit_token("TOKEN_CREATE", row, actor)
    _any_tokens_cache = (0.0, False)
    return row, plain


def token_revoke(*, prefix: str, actor: str) -> int:
    """Revoke every live token with this prefix (as `token list` shows it); audited."""
    global _any_tokens_cache
    with transaction.atomic():
        rows = list(ApiToken.objects.select_for_update().filter(prefix=prefix, revoked=False))
        for row in rows:
            row.revoked = True
            row.save(update_fields=["revoked"])
            _audit_token("TOKEN_REVOKE", row, actor)
    _any_tokens_cache = (0.0, False)
    return len(rows)


def _audit_token(operation: str, row: ApiToken, actor: str) -> None:
    from memories.models import AuditLog

    AuditLog.objects.create(
        timestamp=timezone.now(), namespace="*", operation=operation, client_id=actor,
        details={"name": row.name, "prefix": row.prefix, "namespaces": row.namespaces, "read_only": row.read_only},
    )
