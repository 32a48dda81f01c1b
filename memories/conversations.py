"""Threads: the messages of one conversation, in order, and each message's neighbours.

A thread is a client-chosen id scoped to a namespace; its memories are ordered by
``occurred_at``, then arrival (``created_at``, then id). A message means little alone
("Yeah, I went there last Friday"), so it is indexed with its neighbours:

- full-text: a down-weighted *context* field holds the ``CONTEXT_BEFORE`` turns before it,
  the ``CONTEXT_AFTER`` turns after it and the date of ``occurred_at`` in words (search/fulltext.py);
- vector: the passage embedded is the last ``EMBED_PREVIOUS_WORDS`` words of each of the
  ``EMBED_BEFORE`` turns before it, then the message itself, so a later message never changes
  an earlier message's vector (and a long reply before a short message neither drowns it nor
  makes its embedding slow).

When a message is written or removed, the turns whose window holds it get their context again
(memories.funnel asks :func:`affected_turns`). The window sizes were measured on the LoCoMo dev
half (bench/retrieval.py --threads; docs/retrieval.md).
"""
from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from datetime import datetime

from django.db.models import Q, QuerySet

from memories.models import Memory

CONTEXT_BEFORE = 2  # turns before a message in its full-text context
CONTEXT_AFTER = 2  # turns after it
EMBED_BEFORE = 1  # turns before it in the passage its vector is computed over
EMBED_PREVIOUS_WORDS = 32  # of each, only the last words (a CJK character counts as a word)
ORDER = ("occurred_at", "created_at", "id")
_FIELDS = ("id", "namespace", "thread", "content", "tags", "speaker", "occurred_at", "created_at", "archived", "message_id")


def _key(memory: Memory) -> tuple[datetime, datetime, str]:
    return memory.occurred_at or memory.created_at, memory.created_at, str(memory.id)


def thread_turns(namespace: str, thread: str) -> QuerySet[Memory]:
    """The live messages of a thread, in conversation order."""
    return Memory.objects.filter(namespace=namespace, thread=thread, archived=False).order_by(*ORDER)


def _before(memory: Memory) -> Q:
    occurred, created, memory_id = _key(memory)
    return (Q(occurred_at__lt=occurred) | Q(occurred_at=occurred, created_at__lt=created)
            | Q(occurred_at=occurred, created_at=created, id__lt=memory_id))


def _after(memory: Memory) -> Q:
    occurred, created, memory_id = _key(memory)
    return (Q(occurred_at__gt=occurred) | Q(occurred_at=occurred, created_at__gt=created)
            | Q(occurred_at=occurred, created_at=created, id__gt=memory_id))


def turns_before(memory: Memory, count: int) -> list[Memory]:
    """Up to ``count`` turns of the memory's thread right before it, oldest first."""
    if count <= 0 or not memory.thread:
        return []
    rows = (thread_turns(memory.namespace, memory.thread).filter(_before(memory)).exclude(pk=memory.pk)
            .order_by("-occurred_at", "-created_at", "-id").only(*_FIELDS)[:count])
    return list(reversed(rows))


def turns_after(memory: Memory, count: int) -> list[Memory]:
    """Up to ``count`` turns of the memory's thread right after it, in order."""
    if count <= 0 or not memory.thread:
        return []
    rows = thread_turns(memory.namespace, memory.thread).filter(_after(memory)).exclude(pk=memory.pk).only(*_FIELDS)
    return list(rows[:count])


RADIUS = CONTEXT_BEFORE + CONTEXT_AFTER  # turns each side from which a write's contexts can all be computed
_window: ContextVar[tuple[list[Memory], bool, bool] | None] = ContextVar("thread_window", default=None)


@contextlib.contextmanager
def known_window(memory: Memory) -> Iterator[None]:
    """Read the RADIUS turns on each side of ``memory`` once; inside the block, :func:`contexts`
    and :func:`affected_turns` take what they need from them instead of querying again."""
    before, after = turns_before(memory, RADIUS), turns_after(memory, RADIUS)
    token = _window.set(([*before, memory, *after], len(before) < RADIUS, len(after) < RADIUS))
    try:
        yield
    finally:
        _window.reset(token)


def _in_window(memory: Memory, before: int, after: int) -> tuple[list[Memory], list[Memory]] | None:
    """``before`` and ``after`` turns around ``memory`` from the known window, if it holds them all."""
    state = _window.get()
    if state is None:
        return None
    turns, starts_thread, ends_thread = state
    position = next((i for i, turn in enumerate(turns) if turn.pk == memory.pk), None)
    if position is None or (position - before < 0 and not starts_thread):
        return None
    if position + after >= len(turns) and not ends_thread:
        return None
    return turns[max(0, position - before):position], turns[position + 1:position + 1 + after]


def affected_turns(memory: Memory) -> list[Memory]:
    """The other turns whose context window holds ``memory`` (they need their context again)."""
    known = _in_window(memory, CONTEXT_AFTER, CONTEXT_BEFORE)
    if known is not None:
        return [*known[0], *known[1]]
    return [*turns_before(memory, CONTEXT_AFTER), *turns_after(memory, CONTEXT_BEFORE)]


def date_words(value: datetime | None) -> str:
    """"8 May 2023 Monday": what a "when did …" question can match."""
    if value is None:
        return ""
    return f"{value.day} {value.strftime('%B')} {value.year} {value.strftime('%A')}"


def context_text(memory: Memory, before: Sequence[Memory], after: Sequence[Memory]) -> str:
    parts = [turn.content for turn in (*before, *after)]
    parts.append(date_words(memory.occurred_at))
    return "\n".join(p for p in parts if p)


def contexts(memories: Iterable[Memory]) -> dict[str, str]:
    """The context text of each threaded memory (id → text); plain memories have none."""
    out: dict[str, str] = {}
    groups: dict[tuple[str, str], list[Memory]] = defaultdict(list)
    for memory in memories:
        if memory.thread and not memory.archived:
            groups[(memory.namespace, memory.thread)].append(memory)
    for group in groups.values():
        out.update(_group_contexts(group))
    return out


def _group_contexts(group: list[Memory]) -> dict[str, str]:
    """Contexts of several memories of one thread: one range read instead of two queries each."""
    known = [(m, _in_window(m, CONTEXT_BEFORE, CONTEXT_AFTER)) for m in group]
    if all(window is not None for _, window in known):
        return {str(m.id): context_text(m, *window) for m, window in known}
    if len(group) == 1:
        memory = group[0]
        return {str(memory.id): context_text(memory, turns_before(memory, CONTEXT_BEFORE),
                                             turns_after(memory, CONTEXT_AFTER))}
    group = sorted(group, key=_key)
    first, last = group[0], group[-1]
    middle = thread_turns(first.namespace, first.thread).filter(~_before(first), ~_after(last)).only(*_FIELDS)
    ordered = [*turns_before(first, CONTEXT_BEFORE), *middle, *turns_after(last, CONTEXT_AFTER)]
    position = {str(turn.id): i for i, turn in enumerate(ordered)}
    out = {}
    for memory in group:
        i = position.get(str(memory.id))
        if i is None:
            continue
        out[str(memory.id)] = context_text(memory, ordered[max(0, i - CONTEXT_BEFORE):i], ordered[i + 1:i + 1 + CONTEXT_AFTER])
    return out


_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\s\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


def tail_words(text: str, count: int) -> str:
    """The end of ``text`` from its ``count``-th last word on (CJK characters are words), as written."""
    starts = [match.start() for match in _WORD.finditer(text)]
    return text[starts[-count]:] if len(starts) > count else text


def embedding_text(content: str, previous: Sequence[str]) -> str:
    """The passage a threaded message's vector is computed over: the end of the turn(s) before
    it, then the message."""
    if not EMBED_BEFORE:
        return content
    return "\n".join([*(tail_words(turn, EMBED_PREVIOUS_WORDS) for turn in previous[-EMBED_BEFORE:]), content])


def keyed_passage(content: str, key: str | None) -> str:
    """What a fact's vector is computed over: its key, then its content ("alice/home city: Alice
    moved to Berlin."). The key names the slot the fact fills, so a question about the slot
    ("where does Alice live?") finds that fact rather than another one about Alice. Without a key:
    the content alone, as always. (A key never goes with a thread's message.)"""
    return f"{key}: {content}" if key else content


def passage(memory: Memory) -> str:
    """What ``memory``'s vector is computed over: its content, with the turn(s) before it if
    threaded, or after its fact key if it has one (:func:`keyed_passage`)."""
    if not memory.thread:
        return keyed_passage(memory.content, memory.fact_key)
    return embedding_text(memory.content, [turn.content for turn in turns_before(memory, EMBED_BEFORE)])


def affected_by_batch(memories: Sequence[Memory]) -> list[Memory]:
    """The turns outside ``memories`` whose context window holds one of them (for a batch
    appended or removed at once: one range read per thread)."""
    batch_ids = {str(m.id) for m in memories}
    found: dict[str, Memory] = {}
    groups: dict[tuple[str, str], list[Memory]] = defaultdict(list)
    for memory in memories:
        if memory.thread:
            groups[(memory.namespace, memory.thread)].append(memory)
    for group in groups.values():
        group.sort(key=_key)
        first, last = group[0], group[-1]
        middle = thread_turns(first.namespace, first.thread).filter(~_before(first), ~_after(last)).only(*_FIELDS)
        for turn in (*turns_before(first, CONTEXT_AFTER), *middle, *turns_after(last, CONTEXT_BEFORE)):
            if str(turn.id) not in batch_ids:
                found[str(turn.id)] = turn
    return list(found.values())
