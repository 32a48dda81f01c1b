"""BM25 as a sparse vector: what a Qdrant point carries so full-text search runs inside Qdrant.

The same analyzer as the in-process index (:func:`memories.analyzer.analyze`: jieba for CJK,
Snowball stemming, stopwords) and the same fields and weights (content; tags and a fact's key
×``TAG_WEIGHT``, hyphens split; a threaded message's context ×``CONTEXT_WEIGHT``, BM25F). A point's sparse
vector holds, per term, BM25's term-frequency part::

    tf · (k1 + 1) / (tf + k1 · (1 − b + b · len / AVG_LEN))

and the collection's sparse vector is configured with Qdrant's ``Modifier.IDF``, so the
engine multiplies each query term by ``ln(1 + (N − df + 0.5) / (df + 0.5))`` from its own
document counts: a query vector of 1.0 per distinct term then scores exactly BM25.

Term ids are the first 4 bytes of the token's blake2b digest (a uint32), so every process
and every device agrees on them without a shared vocabulary. Two tokens sharing an id (one
chance in ~4·10⁹ per pair) merely count as one term.

``AVG_LEN`` is fixed rather than measured per collection (a point's weights must not change
when other memories arrive): 24 analyzed tokens, the order of a typical memory (the LoCoMo
dev turns average 13.8 analyzed tokens; a message's context adds half of its ≈ 60, so
plain memories sit below and messages above). With
b = 0.4, a collection whose true mean is twice or half that moves a document's length
normaliser by at most 40 % of the way BM25 itself would, and ranks within a query are
affected only through the length term.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from memories.analyzer import analyze, analyze_query

VECTOR_NAME = "bm25"  # the named sparse vector of every bhgbrain_* collection
TAG_WEIGHT = 2  # tags count twice in BM25 (chosen on the retrieval benchmark)
CONTEXT_WEIGHT = 0.5  # a context word counts half a content word (measured: docs/retrieval.md)
K1, B = 0.9, 0.4
AVG_LEN = 24.0  # the fixed average document length of the sparse vectors (see above)


def labels(tags: Iterable[str], key: str | None) -> list[str]:
    """What the label field holds: the tags, and a fact's key ("alice/home city"), which names the
    slot the fact fills, so a search for the slot's words finds it."""
    return [*tags, key] if key else list(tags)


def field_tokens(content: str, tags: Iterable[str], context: str = "") -> tuple[list[str], list[str], list[str]]:
    """The analyzed content, tags (hyphens split) and context: what both BM25 indexes count."""
    tag_text = " ".join(t.replace("-", " ") for t in tags)
    return analyze(content), analyze(tag_text), analyze(context) if context else []


def term_id(token: str) -> int:
    """A stable uint32 for a token: the first 4 bytes of its blake2b digest."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big")


def document_weights(content: Sequence[str], tags: Sequence[str], context: Sequence[str] = ()) -> dict[int, float]:
    """term id → saturated term frequency of one document (the IDF is Qdrant's)."""
    counts: dict[int, float] = {}
    for tokens, weight in ((content, 1.0), (tags, float(TAG_WEIGHT)), (context, CONTEXT_WEIGHT)):
        for token in tokens:
            key = term_id(token)
            counts[key] = counts.get(key, 0.0) + weight
    length = len(content) + TAG_WEIGHT * len(tags) + CONTEXT_WEIGHT * len(context)
    norm = K1 * (1 - B + B * length / AVG_LEN)
    return {key: tf * (K1 + 1) / (tf + norm) for key, tf in counts.items()}


def memory_weights(content: str, tags: Iterable[str], context: str = "") -> dict[int, float]:
    """The sparse vector of a memory's text, tags and (for a message) context."""
    return document_weights(*field_tokens(content, tags, context))


def query_weights(query: str) -> dict[int, float]:
    """The sparse query vector: 1.0 per distinct analyzed term (Qdrant multiplies in the IDF)."""
    return dict.fromkeys((term_id(t) for t in analyze_query(query)), 1.0)
