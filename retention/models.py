"""The archive (memories the retention cleanup removed, kept whole so a restore loses nothing) and
the record of backups."""
from __future__ import annotations

from django.db import models

from bhgbrain_site.core.contracts import (
    CATEGORY_NAME_MAX,
    COLLECTION_MAX,
    DEVICE_ID_MAX,
    NAMESPACE_MAX,
    SUMMARY_MAX,
)
from memories.models import ConversationFields


class ArchivedMemory(ConversationFields):
    """Everything of a deleted memory (the original kept only a 120-character summary)."""

    memory_id = models.UUIDField(db_index=True)
    namespace = models.CharField(max_length=NAMESPACE_MAX)
    collection = models.CharField(max_length=COLLECTION_MAX)
    type = models.CharField(max_length=16)
    category = models.CharField(max_length=CATEGORY_NAME_MAX, null=True, blank=True)
    content = models.TextField()
    summary = models.CharField(max_length=SUMMARY_MAX)
    tags = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=16)
    checksum = models.CharField(max_length=64)
    importance = models.FloatField(default=0.5)
    tier = models.CharField(max_length=2)  # the tier it had when it expired
    access_count = models.PositiveIntegerField(default=0)
    last_accessed = models.DateTimeField(null=True, blank=True)
    device_id = models.CharField(max_length=DEVICE_ID_MAX, null=True, blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()  # the memory's own creation time
    expired_at = models.DateTimeField()  # when the cleanup removed it
    restored_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "memory_archive"
        indexes = [models.Index(fields=["namespace", "restored_at", "expired_at"], name="idx_archive_listing")]
        verbose_name = "archived memory"
        verbose_name_plural = "archived memories"

    def __str__(self) -> str:
        return f"{self.namespace}: {self.summary}"


class CompactionState(models.Model):
    """How many memories were deleted since the store was last compacted (one row, pk 1).

    The count comes from the change feed, which every deletion appends in its own transaction
    (memories/funnel.py): ``deletions`` holds the DELETE rows already tallied, up to feed row
    ``counted_through``; the feed rows after it are counted live. The cleanup tallies before it
    prunes the feed, so pruning loses nothing (retention/compaction.py)."""

    deletions = models.BigIntegerField(default=0)
    counted_through = models.BigIntegerField(default=0)  # the last change-feed id in ``deletions``
    compacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "compaction_state"


class BackupRecord(models.Model):
    """A backup this store wrote (``bhgbrain backup list`` also finds .bhgb files copied in)."""

    path = models.CharField(max_length=1000, unique=True)
    size_bytes = models.BigIntegerField()
    memory_count = models.PositiveIntegerField()
    checksum = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "backup_metadata"
