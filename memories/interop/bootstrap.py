"""The original's two extra tools: the bootstrap interview and profile/freeform import.

Both store paragraphs through memory_remember, so every paragraph gets normalisation,
secret rejection, dedup and an audit row like any other memory.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.errors import InvalidInput
from bhgbrain_site.core.progress import Progress
from memories.models import BootstrapSession, Memory
from memories.pipeline import normalize, tiers
from memories.quotas import admission
from memories.remember import RememberInput, memory_remember
from memories.services import memory_forget


@dataclass(frozen=True)
class Section:
    number: int
    title: str
    collection: str
    type: str
    tier: str
    importance: float
    tags: tuple[str, ...]
    keywords: tuple[str, ...]  # how a profile heading is recognised
    questions: tuple[str, ...]


SECTIONS: tuple[Section, ...] = (
    Section(1, "Identity & Role", "identity", "semantic", "T0", 1.0, ("identity", "role", "profile"), ("identity", "role", "who"),
            ("What is your name and job title?", "What organisation do you work for, and what is your primary role there?",
             "Which parts of your role face customers, and which are internal?")),
    Section(2, "Responsibilities & Outcomes", "responsibilities", "semantic", "T1", 0.8, ("responsibilities",),
            ("responsibilit", "outcome"),
            ("What are you accountable for?", "Which outcomes are you measured on?",
             "Where do you have influence without ownership?")),
    Section(3, "Goals & Priorities", "goals", "semantic", "T1", 0.75, ("goals",), ("goal", "priorit"),
            ("What must get done in the next 30 days?", "What are this quarter's priorities?", "What do you want to achieve this year?")),
    Section(4, "Communication Style", "communication", "semantic", "T2", 0.55, ("communication",), ("communication", "style"),
            ("How do you like information presented (length, format, tone)?", "What should an assistant never do when writing to you?")),
    Section(5, "Work Patterns", "work-patterns", "procedural", "T2", 0.55, ("work-patterns",), ("work pattern", "schedule", "routine"),
            ("When do you do deep, strategic work, and when do you execute?", "How do you plan a week?")),
    Section(6, "Tools & Systems", "tools", "semantic", "T1", 0.7, ("tools",), ("tool", "system", "platform"),
            ("Which systems are the source of truth for your work?", "Which platforms do you use every day, and for what?")),
    Section(7, "Company & Entity Mapping", "entities", "semantic", "T0", 0.95, ("entities",), ("compan", "entit", "customer", "organi"),
            ("Which organisations, customers and products matter to you?", "How are they related (owner, client, partner)?")),
    Section(8, "GitHub & Repository Structure", "repositories", "semantic", "T0", 0.9, ("repositories",),
            ("github", "repositor", "repo", "code"),
            ("Which GitHub organisations and repositories do you work in?", "Who owns what in those repositories?")),
    Section(9, "Tenants & Environments", "tenants", "semantic", "T0", 0.9, ("tenants",),
            ("tenant", "environment", "azure", "cloud"),
            ("Which cloud tenants and subscriptions exist, and what is each for?",
             "What are the dev, staging and production environments?")),
    Section(10, "Operating Rules", "operating-rules", "procedural", "T0", 1.0, ("operating-rules",),
            ("operating rule", "rule", "convention", "disambiguation"),
            ("Which naming conventions and default assumptions should an assistant follow?",
             "How should ambiguous names be resolved?")),
)
BY_NUMBER = {s.number: s for s in SECTIONS}
PROFILE_TAGS = ("bootstrap", "profile")


def paragraphs(text: str) -> list[str]:
    """Split on blank lines; every non-empty paragraph becomes one memory."""
    return [p.strip() for p in re.split(r"\n\s*\n", normalize.normalize_content(text)) if p.strip()]


def _store(section: Section | None, text: str, namespace: str, actor: str) -> tuple[str, str]:
    data = RememberInput(
        content=text, namespace=namespace,
        collection=section.collection if section else "general",
        type=section.type if section else "semantic",
        tags=(*section.tags, *PROFILE_TAGS) if section else PROFILE_TAGS[:1],
        importance=section.importance if section else 0.5,
        source="import",
        retention_tier=section.tier if section else None,
    )
    result = memory_remember(data=data, actor=actor)
    return result.id, result.operation


def _sessions(namespace: str) -> dict[int, BootstrapSession]:
    existing = {s.section_number: s for s in BootstrapSession.objects.filter(namespace=namespace)}
    for section in SECTIONS:
        if section.number not in existing:
            existing[section.number] = BootstrapSession.objects.create(namespace=namespace, section_number=section.number)
    return existing


def _section_view(section: Section) -> dict[str, Any]:
    return {"section": section.number, "title": section.title, "questions": list(section.questions),
            "collection": section.collection, "tier": section.tier}


def _next(namespace: str) -> dict[str, Any]:
    sessions = _sessions(namespace)
    pending = [s for s in SECTIONS if sessions[s.number].status != "complete"]
    done = len(SECTIONS) - len(pending)
    if not pending:
        total = sum(len(sessions[n].memory_ids) for n in BY_NUMBER)
        return {"complete": True, "sections_complete": done, "memories_created": total}
    return {"complete": False, "sections_complete": done, "next": _section_view(pending[0])}


def bootstrap_start(*, namespace: str) -> dict[str, Any]:
    """Create or resume the interview; returns the first incomplete section."""
    with transaction.atomic():
        return _next(namespace)


def bootstrap_submit(*, namespace: str, section: int, answers: str, actor: str,
                     progress: Progress | None = None) -> dict[str, Any]:
    """Store each answer paragraph as a memory of the section; returns the next section.
    ``progress`` hears ("memories", paragraphs stored, paragraphs) after each one."""
    spec = BY_NUMBER[section]
    chunks = paragraphs(answers)
    if not chunks:
        raise InvalidInput("answers: no paragraph to store")
    ids, skipped = [], 0
    for done, chunk in enumerate(chunks, start=1):
        memory_id, operation = _store(spec, chunk, namespace, actor)
        ids.append(memory_id)
        skipped += operation == "NOOP"
        if progress is not None:
            progress("memories", done, len(chunks))
    with transaction.atomic():
        session = _sessions(namespace)[section]
        session.memory_ids = list(dict.fromkeys([*session.memory_ids, *ids]))
        session.status = "complete"
        session.save()
        return {"section": section, "memories_created": len(ids) - skipped, "duplicates_skipped": skipped, **_next(namespace)}


def bootstrap_status(*, namespace: str) -> dict[str, Any]:
    sessions = _sessions(namespace)
    rows = [{"section": s.number, "title": s.title, "status": sessions[s.number].status,
             "memory_count": Memory.objects.filter(pk__in=sessions[s.number].memory_ids, archived=False).count()}
            for s in SECTIONS]
    return {"namespace": namespace, "sections": rows, "complete": all(r["status"] == "complete" for r in rows)}


def bootstrap_reset(*, namespace: str, section: int, actor: str) -> dict[str, Any]:
    """Set a section back to pending and forget the memories it created."""
    session = _sessions(namespace)[section]
    forgotten = 0
    for memory_id in session.memory_ids:
        if Memory.objects.filter(pk=memory_id, namespace=namespace, archived=False).exists():
            memory_forget(memory_id=memory_id, namespace=namespace, actor=actor)
            forgotten += 1
    session.memory_ids, session.status = [], "pending"
    session.save()
    return {"section": section, "status": "pending", "memories_forgotten": forgotten}


def _match_section(heading: str) -> Section | None:
    lower = heading.lower()
    for section in SECTIONS:
        if section.title.lower() in lower or any(k in lower for k in section.keywords):
            return section
    return None


def _profile_blocks(text: str) -> list[tuple[str | None, str]]:
    """(heading, body) blocks of a structured profile; text before the first heading has none."""
    blocks: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in normalize.normalize_content(text).split("\n"):
        match = re.match(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", line)
        if match:
            blocks.append((match.group(1), []))
        else:
            blocks[-1][1].append(line)
    return [(heading, "\n".join(lines)) for heading, lines in blocks if "\n".join(lines).strip()]


def _plan(fmt: str, content: str) -> list[tuple[Section | None, str, str | None]]:
    if fmt == "freeform":
        return [(None, chunk, None) for chunk in paragraphs(content)]
    plan = []
    for heading, body in _profile_blocks(content):
        section = _match_section(heading) if heading else None
        plan.extend((section, chunk, heading) for chunk in paragraphs(body))
    return plan


def profile_import(*, namespace: str, fmt: str, content: str, dry_run: bool, actor: str,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Import a structured profile (sections by heading) or freeform text (paragraphs);
    ``progress`` hears ("memories", paragraphs stored, paragraphs planned) after each one."""
    plan = _plan(fmt, content)
    if not plan:
        raise InvalidInput("content: nothing to import")
    for _section, chunk, _heading in plan:
        normalize.reject_secrets(chunk)  # refuse the whole import before storing anything
    collections = sorted({s.collection if s else "general" for s, _c, _h in plan})
    sections = sorted({h for _s, _c, h in plan if h})
    out: dict[str, Any] = {"dry_run": dry_run, "format": fmt, "collections": collections, "sections_processed": len(sections)}
    if dry_run:
        out.update(memories_created=0, duplicates_skipped=0, previews=[_preview(s, c, h) for s, c, h in plan])
        return out
    _room_check(namespace, plan)
    created = skipped = 0
    for done, (section, chunk, _heading) in enumerate(plan, start=1):
        _memory_id, operation = _store(section, chunk, namespace, actor)
        created += operation != "NOOP"
        skipped += operation == "NOOP"
        if progress is not None:
            progress("memories", done, len(plan))
    out.update(memories_created=created, duplicates_skipped=skipped)
    return out


def _tier(section: Section | None, chunk: str, tags: list[str]) -> str:
    return tiers.assign_tier(content=chunk, tags=tags, source="import", memory_type=section.type if section else "semantic",
                             category=None, explicit_tier=section.tier if section else None)


def _room_check(namespace: str, plan: list[tuple[Section | None, str, str | None]]) -> None:
    """Refuse the whole import when the namespace's quota cannot take its new memories (those
    whose text the namespace does not already hold), rather than stop half-way."""
    held = set(Memory.objects.filter(namespace=namespace, archived=False, thread__isnull=True)
               .filter(checksum__in=[normalize.checksum(normalize.normalize_content(c)) for _s, c, _h in plan])
               .values_list("checksum", flat=True))
    incoming: Counter[str] = Counter()
    for section, chunk, _heading in plan:
        checksum = normalize.checksum(normalize.normalize_content(chunk))
        if checksum not in held:
            held.add(checksum)  # the same paragraph twice is one memory
            incoming[_tier(section, chunk, [*section.tags, *PROFILE_TAGS] if section else [PROFILE_TAGS[0]])] += 1
    admission.room_check(namespace, incoming, at=timezone.now(), what="the import")


def _preview(section: Section | None, chunk: str, heading: str | None) -> dict[str, Any]:
    tags = [*section.tags, *PROFILE_TAGS] if section else [PROFILE_TAGS[0]]
    tier = _tier(section, chunk, tags)
    return {"content": chunk[:200], "collection": section.collection if section else "general",
            "type": section.type if section else "semantic", "tier": tier, "tags": tags, "section": heading}
