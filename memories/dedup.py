"""Semantic dedup decisions: per-tier thresholds and the fact guard.

Thresholds apply to *calibrated* similarity (see memories.embeddings). The fact guard
exists because no embedding model separates "the same fact reworded" from "a different
fact about the same subject" by cosine alone: e5 puts "JWT signed with RS256" and
"... HS256" at 0.989, above most true paraphrases. Merging replaces content, so a false
merge loses data while a false add only keeps a near-duplicate: the guard vetoes a merge
when the two texts disagree on a fact-bearing token.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_SPLIT_ALNUM_RE = re.compile(r"\d+|[^\W\d_]+", re.UNICODE)
_SENTENCE_END_RE = re.compile(r"[.!?:;\n]\s*$")

NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
    "hundred": "100", "thousand": "1000", "once": "1", "twice": "2", "single": "1", "an": None,
}
CALENDAR_WORDS = {
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "january", "february", "march", "april", "may", "june", "july", "august",
    "september", "october", "november", "december",
}
STOPWORDS = {
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "by", "for", "with",
    "from", "as", "is", "are", "was", "were", "be", "been", "being", "it", "its", "this",
    "that", "these", "those", "we", "our", "us", "they", "their", "he", "she", "his", "her",
    "i", "my", "you", "your", "has", "have", "had", "do", "does", "did", "will", "would",
    "should", "can", "could", "after", "before", "every", "each", "all", "any", "some",
    "now", "then", "there", "here", "so", "not", "no", "also", "just", "about", "into",
    "than", "which", "who", "whom", "what", "when", "where", "how", "per", "via",
}


@dataclass(frozen=True)
class TierThresholds:
    noop: float
    update: float


def tier_thresholds(tier: str, base: float) -> TierThresholds:
    """The seed's table: T0/T1 strict, T2 = base, T3 aggressive."""
    if tier in ("T0", "T1"):
        return TierThresholds(noop=0.98, update=max(base, 0.95))
    if tier == "T3":
        return TierThresholds(noop=0.95, update=max(base, 0.90))
    return TierThresholds(noop=0.98, update=base)


def _stem(word: str) -> str:
    for suffix, keep in (("ing", 3), ("ed", 3), ("es", 3), ("s", 3)):
        if len(word) >= len(suffix) + keep and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True)
class _Profile:
    content: frozenset[str]
    facts: frozenset[str]
    numbers: frozenset[str]


def _profile(text: str) -> _Profile:
    content: set[str] = set()
    facts: set[str] = set()
    numbers: set[str] = set()
    sentence_start = True
    for match in _WORD_RE.finditer(text):
        raw = match.group(0)
        lower = raw.lower()
        parts = _SPLIT_ALNUM_RE.findall(lower)
        letters = "".join(p for p in parts if not p.isdigit())
        numbers.update(str(int(p)) for p in parts if p.isdigit())
        if lower in NUMBER_WORDS:
            if NUMBER_WORDS[lower]:
                numbers.add(NUMBER_WORDS[lower])
        elif letters and lower not in STOPWORDS and len(letters) > 1:
            content.add(_stem(lower if len(parts) == 1 else letters))
        identifier = len(parts) > 1 and len(letters) > 1  # RS256, v2beta, 3pm
        capitalised = raw[0].isupper() and not sentence_start
        if identifier or lower in CALENDAR_WORDS or (letters == lower and (capitalised or (raw.isupper() and len(raw) > 1))):
            facts.add(_stem(lower))
        prefix = text[max(0, match.end()) : match.end() + 2]
        sentence_start = bool(_SENTENCE_END_RE.match(prefix))
    return _Profile(frozenset(content), frozenset(facts), frozenset(numbers))


def _related(a: str, b: str) -> bool:
    """Same word up to inflection or abbreviation (auth/authentication, retro/retrospective)."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 3 and long_.startswith(short)


def _unmatched(words: frozenset[str], others: frozenset[str]) -> set[str]:
    return {w for w in words if not any(_related(w, o) for o in others)}


def facts_conflict(a: str, b: str) -> bool:
    """True when a and b state different facts: a swapped number, name, date or word.

    One-sided additions ("Alice owns billing" → "Alice owns billing now") are updates,
    not conflicts; a substitution on both sides ("Tuesday" ↔ "Friday", "1 hour" ↔
    "24 hours", "production" ↔ "staging") is a different fact.
    """
    pa, pb = _profile(a), _profile(b)
    if pa.numbers and pb.numbers and pa.numbers != pb.numbers:
        return True
    only_a = _unmatched(pa.content, pb.content)
    only_b = _unmatched(pb.content, pa.content)
    extra_a = _unmatched(pa.facts, pb.content | pb.facts)
    extra_b = _unmatched(pb.facts, pa.content | pa.facts)
    if (extra_a and (extra_b or only_b)) or (extra_b and only_a):
        return True  # a name, identifier or date was swapped for something else
    shared = len(pa.content) - len(only_a)
    return len(only_a) == 1 and len(only_b) == 1 and shared >= 2
