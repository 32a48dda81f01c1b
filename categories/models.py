"""Policy categories: always-injected context blocks, per namespace, versioned."""
from __future__ import annotations

from django.db import models


class Slot(models.TextChoices):
    COMPANY_VALUES = "company-values"
    ARCHITECTURE = "architecture"
    CODING_REQUIREMENTS = "coding-requirements"
    CUSTOM = "custom"


class Category(models.Model):
    namespace = models.CharField(max_length=200, default="global")
    name = models.CharField(max_length=100)
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
