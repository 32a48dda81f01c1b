"""Policy categories: always-injected context blocks, per namespace, versioned."""
from __future__ import annotations

from django.db import models

from bhgbrain_site.core.contracts import CATEGORY_NAME_MAX, NAMESPACE_MAX, SLOTS

Slot = models.TextChoices("Slot", [(name.upper().replace("-", "_"), name) for name in SLOTS])


class Category(models.Model):
    namespace = models.CharField(max_length=NAMESPACE_MAX, default="global")
    name = models.CharField(max_length=CATEGORY_NAME_MAX)
    slot = models.CharField(max_length=32, choices=Slot.choices, default=Slot.CUSTOM)
    content = models.TextField()
    revision = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "categories"
        db_table = "categories"
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="uniq_category")]
        ordering = ["namespace", "slot", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.slot})"


class CategoryRevision(models.Model):
    """The content a category had before each change (append-only)."""

    category = models.ForeignKey(Category, on_delete=models.CASCADE, related_name="revisions")
    revision = models.PositiveIntegerField()
    content = models.TextField()
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    class Meta:
        db_table = "category_revisions"
        constraints = [models.UniqueConstraint(fields=["category", "revision"], name="uniq_category_revision")]
