"""The hand-off pack: what a fresh session needs to carry a conversation on, in at most
``auto_inject.handoff_max_chars`` characters (default 1,500).

Sections, in this order, each with a share of the budget (a section that needs less passes
the rest on):

1. **Profile** — the namespace's categories (values, architecture, coding requirements, custom).
2. **Last turns** — the thread's last messages verbatim, oldest first.
3. **Open items** — planned events, not done or cancelled, whose time has not passed.
4. **Recent topics** — the words the thread's recent turns keep coming back to.
5. **Preferences** — what someone said they prefer, like, dislike or always want.

Every section carries current facts only: a superseded version never enters the pack.
An item is kept whole or cut at the end of a sentence, never in the middle of one; an item
that does not fit is left out. Deterministic: no model, a handful of indexed queries.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from categories.selectors import categories_for_inject
from memories.analyzer import words
from memories.conversations import thread_turns
from memories.models import Memory
from memories.selectors import iso

SHARES = {"profile": 0.25, "last_turns": 0.35, "open_items": 0.15, "topics": 0.10, "preferences": 0.15}
LAST_TURNS = 20
TOPICS = 8
PREFERENCE_SCAN = 500  # the newest memories of the namespace searched for stated preferences
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n")
_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|usually\s+|always\s+|don't\s+|do not\s+|would\s+)?"
    r"(?:prefer|like|love|enjoy|hate|dislike|want|can't stand|cannot stand)\b"
    r"|\bmy (?:favou?rite|preferred)\b|\bplease (?:always|never|don't|do not)\b"
    r"|我(?:很|最|比较|更|不|不太)?(?:喜欢|爱|偏好|讨厌)|最喜欢|请(?:总是|务必|不要|别)",
    re.IGNORECASE,
)


@dataclass
class Section:
    title: str
    lines: list[str]


def fit_sentences(text: str, room: int) -> str | None:
    """``text`` whole, or its longest run of whole sentences within ``room``; None if no sentence fits."""
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    if len(text) <= room:
        return text
    cut = None
    for match in _SENTENCE_END.finditer(text):
        if match.start() > room:
            break
        cut = match.start()
    return text[:cut].rstrip() if cut else None


def _pack(section: Section, room: int) -> tuple[str, int]:
    """The section's text within ``room`` (header included) and how many items made it."""
    header = f"## {section.title}\n"
    if not section.lines or room <= len(header):
        return "", 0
    out, used, count = [header], len(header), 0
    for line in section.lines:
        fitted = fit_sentences(line, room - used - 1)
        if fitted is None:
            continue
        out.append(fitted + "\n")
        used += len(fitted) + 1
        count += 1
    return ("".join(out), count) if count else ("", 0)


def _profile(namespace: str) -> list[str]:
    return [f"{c.name} ({c.slot}): {c.content}" for c in categories_for_inject(namespace=namespace)]


def _last_turns(namespace: str, thread: str | None) -> list[Memory]:
    if not thread:
        return []
    turns = thread_turns(namespace, thread).filter(superseded_by__isnull=True).defer("embedding")
    return list(turns.reverse()[:LAST_TURNS])[::-1]


def _turn_line(turn: Memory) -> str:
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


def _open_items(namespace: str, now: datetime) -> list[str]:
    current = Q(valid_until__gte=now) | Q(valid_until__isnull=True, event_at__gte=now) | Q(
        valid_until__isnull=True, event_at__isnull=True)
    rows = (Memory.objects.filter(current, namespace=namespace, archived=False, status="planned",
                                  superseded_by__isnull=True).defer("embedding")
            .order_by("event_at", "created_at")[:10])
    return [f"{m.content} (due {iso(m.event_at)})" if m.event_at else m.content for m in rows]


def _topics(turns: Sequence[Memory]) -> list[str]:
    """The words the recent turns keep coming back to: most turns first, then the most recent
    (each counted once a turn; speakers' names, numbers and short words left out)."""
    speakers = {w for t in turns if t.speaker for w in words(t.speaker)}
    counts: Counter[str] = Counter()
    latest: dict[str, int] = {}
    for position, turn in enumerate(turns):
        found = {w for w in words(turn.content) if len(w) > 3 and not w.isdigit() and w not in speakers}
        counts.update(found)
        latest.update(dict.fromkeys(found, position))
    ranked = sorted(counts, key=lambda w: (-counts[w], -latest[w], w))[:TOPICS]
    return [", ".join(ranked)] if ranked else []


def _preferences(namespace: str) -> list[str]:
    rows = (Memory.objects.filter(namespace=namespace, archived=False, superseded_by__isnull=True).only("content", "speaker")
            .order_by("-created_at")[:PREFERENCE_SCAN])
    found = [_turn_line(m) for m in rows if _PREFERENCE.search(m.content)]
    return list(dict.fromkeys(found))[:10]


def handoff_pack(*, namespace: str, thread: str | None = None, max_chars: int | None = None) -> dict[str, Any]:
    """The hand-off pack of a namespace (and a thread): ``content`` within ``max_chars``."""
    budget = max_chars or settings.BHGBRAIN.auto_inject.handoff_max_chars
    turns = _last_turns(namespace, thread)
    sources: dict[str, Callable[[], Section]] = {
        "profile": lambda: Section("Profile", _profile(namespace)),
        "last_turns": lambda: Section("Last turns", [_turn_line(t) for t in turns][::-1]),
        "open_items": lambda: Section("Open items", _open_items(namespace, timezone.now())),
        "topics": lambda: Section("Recent topics", _topics(turns)),
        "preferences": lambda: Section("Preferences", _preferences(namespace)),
    }
    parts: list[str] = []
    counts: dict[str, int] = {}
    spare = 0
    for name, build in sources.items():
        section = build()
        room = int(budget * SHARES[name]) + spare
        if name == "last_turns":  # the newest turns matter most: fill from the end, then put them back in order
            text, counts[name] = _pack_newest_first(section, room)
        else:
            text, counts[name] = _pack(section, room)
        parts.append(text)
        spare = room - len(text)
    content = "".join(parts)
    return {"namespace": namespace, "thread": thread, "content": content, "chars": len(content),
            "max_chars": budget, "sections": counts}


def _pack_newest_first(section: Section, room: int) -> tuple[str, int]:
    """Last turns: as many of the newest as fit (``section.lines`` is newest first), shown oldest first."""
    header = f"## {section.title}\n"
    kept, used = [], len(header)
    for line in section.lines:
        fitted = fit_sentences(line, room - used - 1)
        if fitted is None:
            break
        kept.append(fitted)
        used += len(fitted) + 1
    if not kept:
        return "", 0
    return header + "".join(f"{line}\n" for line in reversed(kept)), len(kept)
