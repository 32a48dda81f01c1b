"""What a dedup UPDATE meets: rewordings, elaborations, or changes of the fact? (decision 0018)

    .venv/bin/python bench/dedup_update_mode.py

Each pair (a stored fact, then a new text) goes through the dedup rule remember applies to its
best candidate (memories/dedup.py: calibrated similarity against the tier's thresholds, then the
fact guard ``compare``) with the configured embedder, at tier T2 (the default for these texts).
Printed per kind of pair: how many end ADD, NOOP, UPDATE as a rewording (relation "same": revised
in place under update_mode "reword_in_place") or UPDATE as an elaboration (a new version). The
question it answers: is an in-place revision of a "same words" UPDATE safe, i.e. are those
updates true rewordings and not changes of the fact hidden in stopwords ("not", "before")?
"""
from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REWORDINGS = [
    ("Alice owns the billing service", "The billing service is owned by Alice"),
    ("Deploys happen every Tuesday afternoon", "We deploy every Tuesday afternoon"),
    ("The production database is PostgreSQL 15", "Production runs on PostgreSQL version 15"),
    ("Our auth service uses JWT with 1h expiry", "Our authentication service uses JWTs that expire after one hour"),
    ("The staging cluster runs in eu-west-1", "eu-west-1 is where the staging cluster runs"),
    ("Bruno leads the data platform team", "The data platform team is led by Bruno"),
    ("Invoices are generated on the first day of each month", "On the first day of each month invoices get generated"),
    ("The mobile app is written in Kotlin", "Kotlin is the language the mobile app is written in"),
    ("Code reviews need two approvals", "Two approvals are needed for code reviews"),
    ("The API gateway is Kong", "Kong is our API gateway"),
    ("Customer data is backed up nightly to S3", "Nightly, customer data is backed up to S3"),
    ("Priya maintains the search indexer", "The search indexer is maintained by Priya"),
    ("The CI pipeline runs on GitHub Actions", "GitHub Actions runs the CI pipeline"),
    ("Alice lives in Paris", "Alice's home is in Paris"),
    ("Our on-call rotation changes every Monday", "Every Monday the on-call rotation changes"),
    ("The design system uses Tailwind", "Tailwind is used by the design system"),
    ("Support tickets are triaged by Chen", "Chen triages the support tickets"),
    ("The warehouse sync job runs hourly", "Hourly, the warehouse sync job runs"),
    ("Sprint 14 retrospective: team agreed to add integration tests before merging new endpoints",
     "Sprint 14 retro: the team agreed to add integration tests before new endpoints are merged"),
    ("The offsite is planned in Lisbon", "Lisbon is where the offsite is planned"),
    ("公司的年会在上海举行", "年会在上海举行，是公司的"),
    ("Marta prefers asynchronous standups", "Asynchronous standups are what Marta prefers"),
    ("The billing service retries webhooks three times", "Webhooks are retried three times by the billing service"),
    ("Terraform manages our cloud infrastructure", "Our cloud infrastructure is managed with Terraform"),
]
# the same content words; the fact changed through a word the guard ignores (negation, order in time)
SAME_WORDS_CHANGES = [
    ("Deploys happen on Fridays", "Deploys no longer happen on Fridays"),
    ("We use Redis for caching", "We do not use Redis for caching"),
    ("Run the migrations before deploying", "Run the migrations after deploying"),
    ("Alice is on the billing team", "Alice is not on the billing team"),
    ("The release is blocked by the security review", "The release is not blocked by the security review"),
    ("Backups run before the nightly batch", "Backups run after the nightly batch"),
    ("The VPN is required for staging", "The VPN is no longer required for staging"),
    ("Bruno can approve production deploys", "Bruno can not approve production deploys"),
    ("Feature flags are cleaned up after each release", "Feature flags are cleaned up before each release"),
    ("The mobile team works from the Berlin office", "The mobile team no longer works from the Berlin office"),
    ("Chen joined the platform team", "Chen left the platform team"),
    ("The API accepts API keys", "The API does not accept API keys"),
]
ELABORATIONS = [
    ("The mobile release ships on Monday", "The mobile release ships on Monday at noon"),
    ("The API gateway is Kong", "The API gateway is Kong, deployed with the Helm chart"),
    ("Alice lives in Paris", "Alice lives in Paris with her partner and two cats"),
    ("Deploys happen every Tuesday", "Deploys happen every Tuesday after the change review"),
    ("The staging cluster runs Kubernetes", "The staging cluster runs Kubernetes 1.29 on three nodes"),
    ("Invoices are generated monthly", "Invoices are generated monthly and emailed to the finance team"),
    ("Priya maintains the search indexer", "Priya maintains the search indexer and its BM25 scorer"),
    ("The CI pipeline runs on GitHub Actions", "The CI pipeline runs on GitHub Actions with self-hosted runners"),
    ("Code reviews need two approvals", "Code reviews need two approvals, one from a code owner"),
    ("Customer data is backed up nightly", "Customer data is backed up nightly to S3 in eu-central-1"),
]
VALUE_CHANGES = [
    ("Alice lives in Paris", "Alice lives in Berlin"),
    ("The API gateway is Kong", "The API gateway is Envoy"),
    ("Deploys happen every Tuesday", "Deploys happen every Thursday"),
    ("The production database is PostgreSQL 15", "The production database is PostgreSQL 16"),
    ("Bruno leads the data platform team", "Marta leads the data platform team"),
    ("The CI pipeline runs on GitHub Actions", "The CI pipeline runs on Buildkite"),
    ("The offsite is planned in Lisbon", "The offsite is planned in Porto"),
    ("Support tickets are triaged by Chen", "Support tickets are triaged by Priya"),
]
KINDS = {"rewording": REWORDINGS, "same words, changed fact": SAME_WORDS_CHANGES, "elaboration": ELABORATIONS,
         "value changed": VALUE_CHANGES}


def _setup() -> None:
    os.environ.setdefault("BHGBRAIN_CONFIG", os.path.join(tempfile.mkdtemp(prefix="bhgbrain-dedup-"), "config.json"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")
    import django

    django.setup()


def outcome(embedder, old: str, new: str, base: float) -> tuple[str, float]:  # noqa: ANN001
    """The dedup decision for ``new`` against the stored ``old`` (memories.dedup.semantic_match's rule)."""
    from memories.dedup import Relation, compare, tier_thresholds
    from memories.embeddings import calibrate

    similarity = float(calibrate(float(embedder.embed_passage(old) @ embedder.embed_passage(new)), embedder.curve))
    thresholds = tier_thresholds("T2", base)
    if similarity < thresholds.update:
        return "ADD (below threshold)", similarity
    relation = compare(old, new)
    if relation is Relation.CONFLICT:
        return "ADD (fact guard)", similarity
    if relation in (Relation.ELABORATES, Relation.REVERSES):
        return f"UPDATE {relation.value}", similarity
    if relation is Relation.SAME and similarity < thresholds.noop:
        return "UPDATE same words", similarity
    return f"NOOP ({relation.value})", similarity


def main() -> None:
    _setup()
    from django.conf import settings

    from memories.embeddings import get_embedder

    embedder = get_embedder()
    if embedder is None:
        raise SystemExit("no embedder configured")
    base = settings.BHGBRAIN.deduplication.similarity_threshold
    print(f"model {embedder.model_id}, similarity_threshold {base}, tier T2")
    for kind, pairs in KINDS.items():
        results = [outcome(embedder, old, new, base) for old, new in pairs]
        counts = Counter(name for name, _ in results)
        print(f"\n{kind} ({len(pairs)} pairs): " + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))
        for (old, new), (name, similarity) in zip(pairs, results, strict=True):
            if name.startswith(("UPDATE", "NOOP")):
                print(f"   {similarity:.3f} {name:18} {old!r} → {new!r}")


if __name__ == "__main__":
    main()
