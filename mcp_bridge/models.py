"""Scoped API tokens: stored hashed, each limited to namespaces and optionally read-only."""
from __future__ import annotations

from django.db import models


class ApiToken(models.Model):
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="first characters, to recognise the token")
    namespaces = models.JSONField(default=list, help_text="namespaces this token may read and write")
    read_only = models.BooleanField(default=False)
    revoked = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
