"""Memory records and their companions (collections, revisions, audit, the change feed, tokens)."""
from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from bhgbrain_site.core.contracts import (
    CATEGORY_NAME_MAX,
    COLLECTION_MAX,
    DEVICE_ID_MAX,
    EVENT_STATUSES,
    FACT_KEY_MAX,
    MEMORY_TYPES,
    MESSAGE_ID_MAX,
    NAMESPACE_MAX,
    SOURCES,
    SPEAKER_MAX,
    SUMMARY_MAX,
    TAG_MAX,
    THREAD_MAX,
    TIER_LABELS,
    TIERS,
)

# The choices come from bhgbrain_site.core.contracts, the one list every interface validates against.
MemoryType = models.TextChoices("MemoryType", [(name.upper(), name) for name in MEMORY_TYPES])
MemorySource = models.TextChoices("MemorySource", [(name.upper(), name) for name in SOURCES])
RetentionTier = models.TextChoices("RetentionTier", [(tier, (tier, f"{tier} — {TIER_LABELS[tier]}")) for tier in TIERS])
EventStatus = models.TextChoices("EventStatus", [(name.upper(), name) for name in EVENT_STATUSES])


class Operation(models.TextChoices):
    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    NOOP = "NOOP"


class ConversationFields(models.Model):
    """A message of a thread, an event's validity, and a fact's place in time (``valid_from`` ..
    ``valid_until``, ``superseded_by`` its successor, ``fact_key`` its slot): on live and on
    archived memories alike. A memory is current while ``superseded_by`` is empty."""

    thread = models.CharField(max_length=THREAD_MAX, null=True, blank=True)
    speaker = models.CharField(max_length=SPEAKER_MAX, null=True, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True)
    message_id = models.CharField(max_length=MESSAGE_ID_MAX, null=True, blank=True)
    event_at = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=EventStatus.choices, null=True, blank=True)
    valid_from = models.DateTimeField(null=True, blank=True)  # written on every insert; null reads as created_at
    superseded_by = models.UUIDField(null=True, blank=True)
    fact_key = models.CharField(max_length=FACT_KEY_MAX, null=True, blank=True)

    class Meta:
        abstract = True


CONVERSATION_FIELDS = ("thread", "speaker", "occurred_at", "message_id", "event_at", "valid_until", "status",
                       "valid_from", "superseded_by", "fact_key")


class Memory(ConversationFields):
    """One memory: the seed's MemoryRecord plus its stored embedding; with a ``thread``, one
    message of a conversation (an event, never merged)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.CharField(max_length=NAMESPACE_MAX)
    collection = models.CharField(max_length=COLLECTION_MAX, default="general")
    type = models.CharField(max_length=16, choices=MemoryType.choices, default=MemoryType.SEMANTIC)
    category = models.CharField(max_length=CATEGORY_NAME_MAX, null=True, blank=True)
    content = models.TextField()
    summary = models.CharField(max_length=SUMMARY_MAX)
    tags = models.JSONField(default=list, blank=True)
    source = models.CharField(max_length=16, choices=MemorySource.choices, default=MemorySource.CLI)
    checksum = models.CharField(max_length=64)
    importance = models.FloatField(default=0.5)
    retention_tier = models.CharField(max_length=2, choices=RetentionTier.choices, default=RetentionTier.T2)
    expires_at = models.DateTimeField(null=True, blank=True)
    decay_eligible = models.BooleanField(default=True)
    review_due = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed = models.DateTimeField(null=True, blank=True)
    last_operation = models.CharField(max_length=8, choices=Operation.choices, default=Operation.ADD)
    merged_from = models.CharField(max_length=36, null=True, blank=True)
    stale = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)
    vector_synced = models.BooleanField(default=False)
    device_id = models.CharField(max_length=DEVICE_ID_MAX, null=True, blank=True)
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "memories"
        db_table = "memories"
        indexes = [
            models.Index(fields=["namespace"], name="idx_memories_namespace"),
            models.Index(fields=["namespace", "collection"], name="idx_memories_collection"),
            models.Index(fields=["namespace", "checksum"], name="idx_memories_checksum"),
            models.Index(fields=["namespace", "type"], name="idx_memories_type"),
            models.Index(fields=["category"], name="idx_memories_category"),
            models.Index(fields=["namespace", "collection", "retention_tier"], name="idx_memories_tier"),
            models.Index(fields=["decay_eligible", "expires_at"], name="idx_memories_expiry"),
            models.Index(fields=["retention_tier", "review_due"], name="idx_memories_review_due"),
            models.Index(fields=["archived"], name="idx_memories_archived"),
            models.Index(fields=["vector_synced"], name="idx_memories_vector_sync"),
            models.Index(fields=["namespace", "created_at", "id"], name="idx_memories_list"),
            models.Index(fields=["namespace", "thread", "occurred_at", "created_at"], name="idx_memories_thread"),
            models.Index(fields=["namespace", "status"], name="idx_memories_status"),
            # The dashboard's counts (retention/dashboard.py), answered from small partial indexes:
            # SQLite uses an index for a boolean filter ("NOT archived") only through one whose
            # condition is that same term.
            models.Index(fields=["namespace", "retention_tier"], condition=Q(archived=False), name="idx_live_ns_tier"),
            models.Index(fields=["created_at"], condition=Q(archived=False), name="idx_live_created"),
            models.Index(fields=["expires_at"], condition=Q(archived=False, decay_eligible=True),
                         name="idx_live_expiring"),
            models.Index(fields=["namespace"], condition=Q(archived=False, vector_synced=False),
                         name="idx_live_unsynced"),
            models.Index(fields=["namespace"], condition=Q(archived=False, stale=True), name="idx_live_stale"),
            models.Index(fields=["namespace", "fact_key", "valid_from"], condition=Q(fact_key__isnull=False),
                         name="idx_memories_fact_key"),
            models.Index(fields=["superseded_by"], condition=Q(superseded_by__isnull=False), name="idx_memories_superseded"),
        ]
        constraints = [
            # one live, current copy of a fact; threaded messages are events: the same words may be
            # said twice; a superseded version may say again what a later one says (Alice moved back)
            models.UniqueConstraint(
                fields=["namespace", "checksum"],
                condition=Q(archived=False, thread__isnull=True, superseded_by__isnull=True),
                name="uniq_live_memory_checksum",
            ),
            # without a message id, the same words twice in one thread are one message
            models.UniqueConstraint(
                fields=["namespace", "thread", "checksum"],
                condition=Q(archived=False, thread__isnull=False, message_id__isnull=True),
                name="uniq_live_thread_checksum",
            ),
            models.UniqueConstraint(
                fields=["namespace", "message_id"], condition=Q(message_id__isnull=False), name="uniq_message_id",
            ),
            models.CheckConstraint(condition=Q(importance__gte=0) & Q(importance__lte=1), name="memory_importance_0_1"),
            # one current fact per key and namespace; the superseded ones are its history
            models.UniqueConstraint(
                fields=["namespace", "fact_key"],
                condition=Q(archived=False, fact_key__isnull=False, superseded_by__isnull=True),
                name="uniq_current_fact_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.collection}: {self.summary}"


class Collection(models.Model):
    """A namespace's collection; its embedding model and dimensions are locked at creation."""

    namespace = models.CharField(max_length=NAMESPACE_MAX)
    name = models.CharField(max_length=COLLECTION_MAX)
    embedding_model = models.CharField(max_length=200)
    embedding_dimensions = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "collections"
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="uniq_collection")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class MemoryRevision(models.Model):
    """Append-only snapshot of a memory's content taken before a change replaced it: a T0
    memory's edit (EDIT), every dedup merge (MERGE, with the fields the merge changed in
    ``state``, so a curator can undo it) and the merged text an undo put aside (UNDO_MERGE)."""

    class Kind(models.TextChoices):
        EDIT = "EDIT"
        MERGE = "MERGE"
        UNDO_MERGE = "UNDO_MERGE"

    memory_id = models.UUIDField(db_index=True)
    revision = models.PositiveIntegerField()
    content = models.TextField()
    operation = models.CharField(max_length=16, choices=Kind.choices, default=Kind.EDIT)
    state = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    class Meta:
        db_table = "memory_revisions"
        constraints = [models.UniqueConstraint(fields=["memory_id", "revision"], name="uniq_memory_revision")]


class AuditLog(models.Model):
    """One row per write, recorded in the write's own transaction."""

    timestamp = models.DateTimeField(db_index=True)
    namespace = models.CharField(max_length=NAMESPACE_MAX, db_index=True)
    operation = models.CharField(max_length=32)
    memory_id = models.UUIDField(null=True, blank=True, db_index=True)
    client_id = models.CharField(max_length=200)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "audit_log"
        ordering = ["-timestamp", "-id"]


class ChangeFeedEntry(models.Model):
    """One row of the change feed: every process's in-process indexes (vectors, full text), the
    Qdrant sync and the MCP subscription watcher follow it to stay current.

    Written in the same transaction as the memory change, so a deletion reaches every
    index even after a crash between the DB commit and the index update. On PostgreSQL each row
    also carries its transaction's id (column ``tx``, not a model field: migration 0015), so a
    reader never skips a row that commits after a later id (memories/indexes/feed_cursor.py).
    """

    class Op(models.TextChoices):
        UPSERT = "upsert"
        DELETE = "delete"
        RESET = "reset"  # the whole store was replaced (backup restore): every index reloads
        EXPIRY = "expiry"  # only when the memory stops being searchable moved (access tracking's sliding window)

    memory_id = models.UUIDField()
    op = models.CharField(max_length=8, choices=Op.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "vector_changes"  # its name before the model was renamed; kept (migration 0014)


class VectorIndexCursor(models.Model):
    """How far an external vector index (Qdrant) has applied the change feed."""

    name = models.CharField(max_length=300, primary_key=True)
    last_change = models.BigIntegerField(default=0)
    pending = models.JSONField(default=list, blank=True)  # transactions that may still commit rows below it (feed_cursor)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "vector_index_cursors"


class BootstrapSession(models.Model):
    """Progress of the guided profile interview (the bootstrap tool), per namespace and section."""

    namespace = models.CharField(max_length=NAMESPACE_MAX)
    section_number = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=10, default="pending")  # pending | complete
    memory_ids = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "bootstrap_sessions"
        constraints = [models.UniqueConstraint(fields=["namespace", "section_number"], name="uniq_bootstrap_section")]


class ApiToken(models.Model):
    """A scoped API token: stored hashed, limited to namespaces, optionally read-only."""

    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="first characters, to recognise the token")
    namespaces = models.JSONField(default=list, help_text="namespaces this token may read and write")
    read_only = models.BooleanField(default=False)
    revoked = models.BooleanField(default=False)
    write_rate_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="writing calls this token may make in any 60 s (empty: no limit)")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class CuratorScope(models.Model):
    """The namespaces a staff user may curate in the admin. A user without one (or a superuser)
    curates every namespace; with one, lists, counts, actions and the dashboard show only these."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="curator_scope")
    namespaces = models.JSONField(default=list, help_text="namespaces this user may see and change in the admin")

    class Meta:
        db_table = "curator_scopes"

    def __str__(self) -> str:
        return f"{self.user} → {', '.join(self.namespaces) or '(none)'}"


class AccessDay(models.Model):
    """How many times memories of a namespace were retrieved on a day (the dashboard's chart)."""

    day = models.DateField()
    namespace = models.CharField(max_length=NAMESPACE_MAX)
    accesses = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "access_days"
        constraints = [models.UniqueConstraint(fields=["day", "namespace"], name="uniq_access_day")]


class MemoryTag(models.Model):
    """One tag of one live memory, kept by the write funnel (memories/indexes/tag_index.py): tag completion
    reads a namespace's tags from this table's index instead of every memory's JSON list."""

    memory_id = models.UUIDField()
    namespace = models.CharField(max_length=NAMESPACE_MAX)
    tag = models.CharField(max_length=TAG_MAX)

    class Meta:
        db_table = "memory_tags"
        indexes = [
            models.Index(fields=["namespace", "tag"], name="idx_memory_tags_tag"),
            models.Index(fields=["memory_id"], name="idx_memory_tags_memory"),
        ]


class NamespaceQuota(models.Model):
    """A namespace's quota set in the admin or with ``bhgbrain namespace quota``: it replaces the
    config's ``namespaces.<ns>`` (or ``namespace_defaults``) for that namespace, in every process
    at once (memories/quotas/limits.py). Null: no limit."""

    class Policy(models.TextChoices):
        REJECT = "reject"
        TRIM = "trim"

    namespace = models.CharField(max_length=NAMESPACE_MAX, unique=True)
    max_memories = models.PositiveIntegerField(null=True, blank=True)
    t0_budget = models.PositiveIntegerField(null=True, blank=True)
    t1_budget = models.PositiveIntegerField(null=True, blank=True)
    t2_budget = models.PositiveIntegerField(null=True, blank=True)
    t3_budget = models.PositiveIntegerField(null=True, blank=True)
    on_quota_exceeded = models.CharField(max_length=8, choices=Policy.choices, default=Policy.REJECT)
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200)

    class Meta:
        db_table = "namespace_quotas"

    def __str__(self) -> str:
        return f"quota of {self.namespace}"


class NamespaceUsage(models.Model):
    """Live memories per namespace and tier, kept by database triggers on ``memories`` (migration
    0015), so no write path can make it drift: one row per namespace on SQLite; on PostgreSQL each
    change appends a row (no two writers wait on one counter row) and the quota check folds a
    namespace's rows into one. A namespace's count is the sum of its rows (memories/quotas/usage.py)."""

    namespace = models.CharField(max_length=NAMESPACE_MAX)
    t0 = models.BigIntegerField(default=0)
    t1 = models.BigIntegerField(default=0)
    t2 = models.BigIntegerField(default=0)
    t3 = models.BigIntegerField(default=0)

    class Meta:
        db_table = "namespace_usage"
        indexes = [models.Index(fields=["namespace"], name="idx_namespace_usage")]
