"""Measure the cosine populations that anchor an embedder's calibration curve.

    .venv/bin/python bench/calibrate_embeddings.py [--eval ../shared/eval] [--pairs 300]

Prints percentiles of raw cosine for: unrelated passage pairs and query↔gold /
query↔random passages (from the LoCoMo dev half in ../shared/eval, when present), and
hand-made paraphrase / near-miss / near-identical pairs; then the calibrated value of each
population's median under the provider's curve. docs/embeddings.md records the result.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARAPHRASES = [
    ("Our auth service uses JWT with 1h expiry", "Our authentication service uses JWTs that expire after one hour"),
    ("Deploys happen every Tuesday afternoon", "We deploy every Tuesday afternoon"),
    ("The production database is PostgreSQL 15", "Production runs on PostgreSQL version 15"),
    ("Alice owns the billing service", "The billing service is owned by Alice"),
    ("Sprint 14 retrospective: team agreed to add integration tests before merging new endpoints",
     "Sprint 14 retro: the team agreed to add integration tests before new endpoints are merged"),
]
NEAR_MISSES = [
    ("The auth service uses JWT tokens that expire after 1 hour", "The auth service uses JWT tokens that expire after 24 hours"),
    ("The production database is PostgreSQL 15", "The staging database is PostgreSQL 15"),
    ("Alice owns the billing service", "Bob owns the billing service"),
    ("Deploys happen every Tuesday", "Deploys happen every Friday"),
    ("The API rate limit is 100 requests per minute", "The API rate limit is 1000 requests per minute"),
    ("We use Redis for caching session data", "We use Redis as the Celery message broker"),
    ("The frontend is written in React", "The frontend is tested with Cypress"),
    ("Authentication uses JWT tokens signed with RS256", "Authentication uses JWT tokens signed with HS256"),
]
NEAR_IDENTICAL = [
    ("Our auth service uses JWT with 1h expiry", "Our auth service uses JWT with 1h expiry."),
    ("The production database is PostgreSQL 15", "the production database is PostgreSQL 15"),
    ("Deploys happen every Tuesday afternoon", "Deploys happen every Tuesday afternoon!"),
]


def _setup() -> None:
    import tempfile

    os.environ.setdefault("BHGBRAIN_CONFIG", os.path.join(tempfile.mkdtemp(prefix="bhgbrain-calib-"), "config.json"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")
    import django

    django.setup()


def _pairs(embedder, pairs: list[tuple[str, str]]) -> np.ndarray:  # noqa: ANN001
    return np.array([float(embedder.embed_passage(a) @ embedder.embed_passage(b)) for a, b in pairs])


def _eval_populations(embedder, eval_dir: Path, n: int, rng: random.Random) -> dict[str, np.ndarray]:  # noqa: ANN001
    memories = [json.loads(line) for line in (eval_dir / "locomo_memories.jsonl").open()]
    queries = [json.loads(line) for line in (eval_dir / "locomo_queries.jsonl").open()]
    sample = rng.sample(memories, n)
    vectors = np.stack([embedder.embed_passage(m["text"]) for m in sample])
    sims = vectors @ vectors.T
    unrelated = sims[np.triu_indices(n, 1)]
    by_turn = {(m["sample_id"], m["id"]): m["text"] for m in memories}
    gold, rand = [], []
    for query in rng.sample(queries, min(n // 2, len(queries))):
        qv = embedder.embed_query(query["question"])
        text = by_turn.get((query["sample_id"], query["gold"][0])) if query["gold"] else None
        if text:
            gold.append(float(embedder.embed_passage(text) @ qv))
        rand.append(float(vectors[rng.randrange(n)] @ qv))
    return {"passage↔passage unrelated": unrelated, "query↔gold passage": np.array(gold), "query↔random passage": np.array(rand)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval", default=str(Path(__file__).resolve().parents[2] / "shared" / "eval"))
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    _setup()
    from memories.embeddings import calibrate, get_embedder

    embedder = get_embedder()
    if embedder is None:
        raise SystemExit("no embedder configured")
    populations = {
        "paraphrase pairs": _pairs(embedder, PARAPHRASES),
        "near-miss pairs (different facts)": _pairs(embedder, NEAR_MISSES),
        "near-identical pairs": _pairs(embedder, NEAR_IDENTICAL),
    }
    eval_dir = Path(args.eval)
    if (eval_dir / "locomo_memories.jsonl").exists():
        populations.update(_eval_populations(embedder, eval_dir, args.pairs, random.Random(1)))
    else:
        print(f"(no eval data at {eval_dir}: corpus populations skipped)")
    print(f"model: {embedder.model_id}")
    print(f"{'population':36} {'n':>6} {'p5':>7} {'p25':>7} {'p50':>7} {'p75':>7} {'p95':>7}  calibrated p50")
    for name, values in populations.items():
        pct = np.percentile(values, [5, 25, 50, 75, 95])
        cal = float(calibrate(pct[2], embedder.curve))
        print(f"{name:36} {len(values):>6} " + " ".join(f"{p:7.4f}" for p in pct) + f"  {cal:.3f}")


if __name__ == "__main__":
    main()
