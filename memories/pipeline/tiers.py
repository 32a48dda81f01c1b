"""Tier assignment (the seed's 7-step chain) and per-tier lifecycle metadata."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bhgbrain_site.core.config import TierValues

TIER_ORDER = {"T0": 0, "T1": 1, "T2": 2, "T3": 3}

TRANSIENT_PATTERNS: dict[str, re.Pattern[str]] = {
    # JIRA-1234 style keys (upper case), but not standards such as SHA-256 or UTF-8.
    "ticket_key": re.compile(r"\b(?!(?:SHA|AES|UTF|ISO|RFC|ADR|TLS|SSL|HTTP|IPV|PEP|ES|RS|HS|PS|MD|CP|X)-\d)[A-Z][A-Z0-9]{1,9}-\d+\b"),
    # incident-456, case-789, case 790, ticket #12 ("in case 3 servers fail" is not a ticket:
    # with a plain space the number needs 3+ digits).
    "ticket_ref": re.compile(
        r"\b(?:(?:incident|case|issue|ticket)(?:-|\s?#)\d+|(?:incident|case|issue|ticket)\s\d{3,}|ticket\s\d+)\b",
        re.IGNORECASE,
    ),
    "email_header": re.compile(r"(?:^|\n)\s*(?:from|subject|to|cc):\s|\b(?:fwd?|re):\s", re.IGNORECASE),
    "time_marker": re.compile(
        r"\b(?:today|tonight|tomorrow|yesterday|this week|next week|"
        r"by (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|eod|end of day)|"
        r"stand-?ups?|meeting minutes|action items?)\b",
        re.IGNORECASE,
    ),
    "quarter_ref": re.compile(r"\bQ[1-4]\s*(?:FY)?\s*'?\d{2,4}\b", re.IGNORECASE),
}

T0_KEYWORDS = re.compile(
    r"\b(?:architecture|design decisions?|adrs?|rfcs?|contracts?|schemas?|legal|compliance|"
    r"polic(?:y|ies)|standards?|accounting|security|runbooks?)\b",
    re.IGNORECASE,
)


# The seed: "bootstrap memories default to T0": ingested with source import and both tags.
BOOTSTRAP_PROFILE_TAGS = frozenset({"bootstrap", "profile"})


def is_bootstrap_profile(source: str, tags: Iterable[str]) -> bool:
    return source == "import" and BOOTSTRAP_PROFILE_TAGS <= {t.lower() for t in tags}


def is_transient(content: str) -> bool:
    return any(p.search(content) for p in TRANSIENT_PATTERNS.values())


def has_t0_signal(content: str, tags: Iterable[str]) -> bool:
    haystack = content + "\n" + " ".join(t.replace("-", " ") for t in tags)
    return T0_KEYWORDS.search(haystack) is not None


def assign_tier(
    *,
    content: str,
    tags: list[str],
    source: str,
    memory_type: str,
    category: str | None,
    explicit_tier: str | None,
) -> str:
    """The seed's chain, in order; the first rule that applies decides."""
    if explicit_tier:
        return explicit_tier  # 1. caller override
    if category:
        return "T0"  # 2. category slots never expire
    if is_bootstrap_profile(source, tags):
        return "T0"  # the seed: "bootstrap memories default to T0", whatever their words
    if source == "agent" and memory_type == "procedural":
        return "T1"  # 3a
    if source == "agent" and memory_type == "episodic":
        return "T2"  # 3b
    if source == "cli":
        return "T2"  # 3c
    if is_transient(content):
        return "T3"  # 4. transient signals win over T0 keywords
    if has_t0_signal(content, tags):
        return "T0"  # 5 (source import) and 6 (any other source): T0 keywords
    return "T2"  # 7. default


def more_durable(a: str, b: str) -> str:
    """The longer-lived of two tiers (T0 beats T1 beats T2 beats T3)."""
    return a if TIER_ORDER[a] <= TIER_ORDER[b] else b


@dataclass(frozen=True)
class TierMetadata:
    expires_at: datetime | None
    decay_eligible: bool
    review_due: datetime | None


def tier_metadata(tier: str, *, anchor: datetime, ttl: TierValues) -> TierMetadata:
    """expires_at = anchor + TTL (none for T0 or a null TTL); review_due only for T1."""
    days = getattr(ttl, tier)
    if tier == "T0" or days is None:
        return TierMetadata(expires_at=None, decay_eligible=False, review_due=None)
    review_due = anchor + timedelta(days=ttl.T1 or 365) if tier == "T1" else None
    return TierMetadata(expires_at=anchor + timedelta(days=days), decay_eligible=True, review_due=review_due)
