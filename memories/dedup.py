"""Semantic dedup decisions: per-tier thresholds and the fact guard.

Thresholds apply to *calibrated* similarity (see memories.embeddings). The fact guard
exists because no embedding model separates "the same fact reworded" from "a different
fact about the same subject" by cosine alone: e5 puts "JWT signed with RS256" and
"... HS256" at 0.989, above most true paraphrases. Merging replaces content, so a false
merge loses data while a false add only keeps a near-duplicate. The guard therefore
compares the two texts word by word (stemmed, stopwords and punctuation ignored) and
never lets a merge drop a word: a substitution on both sides is a different fact (ADD),
a new text that only adds words elaborates the old one (UPDATE), a new text whose words
the old one already holds changes nothing (NOOP), unless a negation is what it adds or drops:
then it turns the old fact around (UPDATE). A negation or an order in time ("before" / "after")
counts as a word although a stopword (POLARITY).
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import numpy as np
from django.conf import settings
from django.db.models import Q

from bhgbrain_site.core.errors import EmbeddingUnavailable
from memories.analyzer import stem
from memories.conversations import keyed_passage
from memories.embeddings import Embedder, calibrate, from_bytes
from memories.indexes.embedded import get_vector_index
from memories.indexes.rebuilds import Rebuilding, answering_around
from memories.indexes.vectors import VectorHit
from memories.loading import memories_by_id
from memories.models import Memory, Operation

logger = logging.getLogger("bhgbrain.dedup")

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_SPLIT_ALNUM_RE = re.compile(r"\d+|[^\W\d_]+", re.UNICODE)

NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50",
    "hundred": "100", "thousand": "1000", "once": "1", "twice": "2", "single": "1", "an": None,
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
# Stopwords that carry the fact: a negation or an order in time turns it around ("Run the
# migrations before deploying" / "... after deploying"; "We use Redis" / "We do not use Redis"),
# so the guard compares them like content words (bench/dedup_update_mode.py; decision 0018).
NEGATIONS = frozenset({"not", "no", "never", "nor", "without"})
POLARITY = NEGATIONS | {"before", "after"}


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


@dataclass(frozen=True)
class _Profile:
    words: frozenset[str]
    numbers: frozenset[str]
    entities: tuple[str, ...]  # names, acronyms, identifiers, numbers: in order of appearance


def _is_entity(raw: str, lower: str, parts: list[str]) -> bool:
    if any(p.isdigit() for p in parts):
        return True
    return raw[0].isupper() and lower not in STOPWORDS and lower not in NUMBER_WORDS and len(lower) > 1


def _profile(text: str) -> _Profile:
    words: set[str] = set()
    numbers: set[str] = set()
    entities: list[str] = []
    for match in _WORD_RE.finditer(text):
        raw = match.group(0)
        lower = raw.lower()
        parts = _SPLIT_ALNUM_RE.findall(lower)
        if _is_entity(raw, lower, parts) and lower not in entities:
            entities.append(lower)
        numbers.update(str(int(p)) for p in parts if p.isdigit())
        if lower in NUMBER_WORDS:
            if NUMBER_WORDS[lower]:
                numbers.add(NUMBER_WORDS[lower])
            continue
        letters = "".join(p for p in parts if not p.isdigit())
        if (lower in STOPWORDS and lower not in POLARITY) or len(letters) < 2:
            continue
        # identifiers keep their digits (RS256 ≠ HS256); plain words are stemmed
        words.add(lower if len(parts) > 1 and letters != lower else stem(lower))
    return _Profile(frozenset(words), frozenset(numbers), tuple(entities))


def _related(a: str, b: str) -> bool:
    """Same word up to inflection or abbreviation (auth/authentication, retro/retrospective)."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 3 and long_.startswith(short)


def _unmatched(words: frozenset[str], others: frozenset[str]) -> set[str]:
    return {w for w in words if not any(_related(w, o) for o in others)}


def _roles_swapped(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """Same names in another order ("from PostgreSQL to MySQL" / "from MySQL to PostgreSQL",
    "Alice reports to Bruno" / "Bruno reports to Alice"): the words match, the fact does not."""
    shared = [e for e in old if e in new]
    return len(shared) >= 2 and shared != [e for e in new if e in old]


class Relation(StrEnum):
    SAME = "same"  # the same words (reordered, re-inflected, re-cased, re-punctuated)
    ELABORATES = "elaborates"  # the new text says everything the old one did, and more
    SUBSUMED = "subsumed"  # the old text already says everything the new one does
    CONFLICT = "conflict"  # a word, name or number was swapped: a different fact
    REVERSES = "reverses"  # a negation or time-order word added or dropped: the same fact turned around


def compare(old: str, new: str) -> Relation:
    """How a near-duplicate candidate relates to the stored text, word by word."""
    po, pn = _profile(old), _profile(new)
    if po.numbers and pn.numbers and po.numbers != pn.numbers:
        return Relation.CONFLICT
    only_old = _unmatched(po.words, pn.words) | (po.numbers - pn.numbers)
    only_new = _unmatched(pn.words, po.words) | (pn.numbers - po.numbers)
    if only_old and only_new:
        return Relation.CONFLICT
    if _roles_swapped(po.entities, pn.entities):
        return Relation.CONFLICT
    if (only_old | only_new) & NEGATIONS:
        return Relation.REVERSES
    if only_new:
        return Relation.ELABORATES
    if only_old:
        return Relation.SUBSUMED
    return Relation.SAME



# --------------------------------------------------------------------------- semantic match

DEDUP_CANDIDATES = 10


def _stored_vector_search(vector: np.ndarray, model_id: str, namespace: str, collection: str,
                          now: datetime) -> list[VectorHit]:
    """Exact cosine over the collection's vectors as stored in the database (the index is down)."""
    live = Q(decay_eligible=False) | Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    rows = (Memory.objects.filter(live, namespace=namespace, collection=collection, archived=False, thread__isnull=True,
                                  superseded_by__isnull=True, embedding_model=model_id, embedding__isnull=False)
            .values_list("id", "embedding"))
    ids, vectors = [], []
    for memory_id, blob in rows.iterator(chunk_size=2000):
        stored = from_bytes(blob)
        if stored.shape == vector.shape:
            ids.append(str(memory_id))
            vectors.append(stored)
    if not vectors:
        return []
    scores = np.vstack(vectors) @ vector
    best = np.argsort(-scores)[:DEDUP_CANDIDATES]
    return [VectorHit(ids[i], float(scores[i])) for i in best]


def _candidates(vector: np.ndarray, model_id: str, namespace: str, collection: str, now: datetime) -> list[VectorHit]:
    index = get_vector_index()
    if index is None:
        return []
    try:
        return index.search(vector, namespace=namespace, collection=collection, limit=DEDUP_CANDIDATES, now=now,
                            facts_only=True)
    except Rebuilding:  # the rows read so far are not all of them: the stored vectors are (the rebuild pauses)
        with answering_around():
            return _stored_vector_search(vector, model_id, namespace, collection, now)
    except Exception:  # noqa: BLE001 - an index outage must not switch dedup off: scan the stored vectors
        logger.exception("vector index unavailable for dedup; scanning the collection's stored vectors instead")
        return _stored_vector_search(vector, model_id, namespace, collection, now)


def same_slot(candidate: Memory, key: str | None) -> bool:
    """Whether a dedup match with ``candidate`` may count for a write of ``key``: a memory without a
    key, or with the write's own key (a fact of another slot is never its duplicate)."""
    return key is None or candidate.fact_key in (None, key)


KEY_MARGIN = 0.05  # cosine a fact's key moves a vector by, at most, against the same text without it (measured: .012-.028)


class _Keyed:
    """The write's vector as a candidate of another key (or none) would have been embedded: a fact's
    vector is computed with its key (memories.conversations.keyed_passage), so a keyed fact and the
    same words without the key are compared like with like. Each key embedded once per write."""

    def __init__(self, vector: np.ndarray, embedder: Embedder, content: str, key: str | None) -> None:
        self.embedder, self.content = embedder, content
        self.vectors: dict[str | None, np.ndarray] = {key: vector}

    def cosine(self, hit: VectorHit, candidate: Memory, threshold: float) -> float:
        """The cosine to compare with ``candidate``'s vector (``threshold``: its calibrated UPDATE bar)."""
        if candidate.fact_key in self.vectors:
            return hit.cosine
        if float(calibrate(hit.cosine + KEY_MARGIN, self.embedder.curve)) < threshold:
            return hit.cosine  # too far to be the same fact under any key: no embedding spent
        stored = Memory.objects.filter(pk=candidate.pk).values_list("embedding", flat=True).first()
        if stored is None:
            return hit.cosine
        try:
            vector = self.embedder.embed_passage(keyed_passage(self.content, candidate.fact_key))
        except EmbeddingUnavailable:
            return hit.cosine  # the model went away meanwhile: the cosine at hand
        self.vectors[candidate.fact_key] = vector
        return float(from_bytes(stored) @ vector)


def semantic_match(vector: np.ndarray, embedder: Embedder, content: str, *, namespace: str, collection: str,
                   now: datetime, key: str | None = None) -> tuple[Memory, str] | None:
    """Top-10 of the collection; the best candidate past its tier's threshold decides.

    Only a current fact without a key or with the write's ``key`` is a candidate; one whose key
    differs from the write's (one of them has none) is compared with the write's text embedded
    under its key (:class:`_Keyed`). Past the threshold the fact guard (:func:`compare`) has the
    last word: a substitution is a different fact (skip the candidate), a subset changes nothing
    (NOOP), an elaboration is an UPDATE, the same words are NOOP or UPDATE by similarity.
    """
    hits = _candidates(vector, embedder.model_id, namespace, collection, now)
    found = memories_by_id([uuid.UUID(h.memory_id) for h in hits])
    base = settings.BHGBRAIN.deduplication.similarity_threshold
    keyed = _Keyed(vector, embedder, content, key)
    for hit in hits:
        candidate = found.get(uuid.UUID(hit.memory_id))
        if candidate is None or candidate.archived or candidate.superseded_by is not None:
            continue  # only a current fact is a candidate: a superseded one has a successor already
        if not same_slot(candidate, key):
            continue
        update = tier_thresholds(candidate.retention_tier, base).update
        similarity = float(calibrate(keyed.cosine(hit, candidate, update), embedder.curve))
        if similarity < update:
            continue
        relation = compare(candidate.content, content)
        if relation is Relation.CONFLICT:
            continue
        noop = tier_thresholds(candidate.retention_tier, base).noop
        if relation in (Relation.ELABORATES, Relation.REVERSES) or (relation is Relation.SAME and similarity < noop):
            return candidate, Operation.UPDATE
        return candidate, Operation.NOOP
    return None
