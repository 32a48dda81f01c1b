"""The tag index (``memory_tags``): one row a tag of every live memory, kept by the write funnel
(registered from memories/apps.py), so a namespace's tags are read from an index (completion,
the remember-this prompt) rather than from every memory's JSON list."""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from memories.models import Memory, MemoryTag

TAG_FIELDS = frozenset({"tags", "namespace", "archived"})  # what a memory's rows are made of
BATCH = 2000


def _rows(memories: Iterable[Memory]) -> list[MemoryTag]:
    return [MemoryTag(memory_id=m.id, namespace=m.namespace, tag=tag)
            for m in memories if not m.archived for tag in dict.fromkeys(m.tags or [])]


class TagIndexer:
    """The write funnel's hook (memories.funnel.Indexer): a memory's tag rows follow its writes."""

    def written(self, memories: Sequence[Memory], fields: frozenset[str] | None) -> None:
        if fields is not None and not fields & TAG_FIELDS:
            return  # content, access counts, vectors: the tags are unchanged
        self.removed([m.id for m in memories])
        MemoryTag.objects.bulk_create(_rows(memories), batch_size=BATCH)

    def removed(self, memory_ids: Sequence[uuid.UUID]) -> None:
        for start in range(0, len(memory_ids), BATCH):
            MemoryTag.objects.filter(memory_id__in=memory_ids[start:start + BATCH]).delete()

    def cleared(self) -> None:
        MemoryTag.objects.all().delete()

