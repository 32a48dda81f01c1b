"""Secret detection: detection and false-positive rates per category, and time per KB.

Runs ``memories.pipeline.normalize.find_secret`` on normalised text, as the write path does, over the
generated corpus of ``tests/secrets_corpus.py`` (fake credentials in real formats and hard
innocent text, fixed seed), and prints:

* per category: samples, flagged, rate (detection for credential categories, false positives
  for innocent ones), then both rates overall;
* time per KB, the best of ``--rounds`` rounds, on 1 KB documents of innocent text (what most
  writes are) and on 1 KB documents that end with a credential;
* with ``--baseline REV``: the same numbers for the detector at that git revision, for a
  before/after comparison.

Usage (from the repository root)::

    .venv/bin/python bench/secret_detection.py
    .venv/bin/python bench/secret_detection.py --baseline 05887ec --seed 7

No assertions: tests/memories/pipeline/test_secret_detection.py holds the quality thresholds.
"""
from __future__ import annotations

import argparse
import importlib.util
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

from machine import cpu_model, load_average, usable_cpus  # noqa: E402
from search_latency import product_revision  # noqa: E402

from memories.pipeline import normalize  # noqa: E402
from tests.secrets_corpus import SEED, Sample, corpus, overall, score  # noqa: E402

DOC_BYTES = 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=SEED, help="corpus seed (default: the tests' seed)")
    parser.add_argument("--rounds", type=int, default=15, help="timing rounds after one warm-up; the best is kept")
    parser.add_argument("--baseline", metavar="REV", help="also measure memories/pipeline/normalize.py at this git revision")
    return parser.parse_args(argv)


def detector_at(revision: str) -> ModuleType:
    """memories/pipeline/normalize.py as it was at a git revision, loaded as a separate module."""
    source = subprocess.run(["git", "show", f"{revision}:memories/pipeline/normalize.py"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "normalize_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("normalize_baseline", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documents(samples: list[Sample], secret: bool) -> list[str]:
    """~1 KB documents: innocent samples joined until 1 KB; with secret, each credential sample
    after ~1 KB of innocent text (the detector has to read all of it before the credential)."""
    innocent = [s.text for s in samples if not s.secret]
    docs: list[str] = []
    current = ""
    for text in innocent * 2:
        current = f"{current}\n\n{text}" if current else text
        if len(current.encode()) >= DOC_BYTES:
            docs.append(current)
            current = ""
    if not secret:
        return docs
    positives = [s.text for s in samples if s.secret]
    return [docs[i % len(docs)][: max(0, DOC_BYTES - len(p.encode()))] + "\n" + p for i, p in enumerate(positives)]


def micros_per_kb(find: Callable[[str], object], docs: list[str], rounds: int) -> float:
    total_kb = sum(len(d.encode()) for d in docs) / 1024
    for doc in docs:  # warm-up
        find(doc)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for doc in docs:
            find(doc)
        best = min(best, time.perf_counter() - started)
    return best / total_kb * 1e6


def report(label: str, module: ModuleType, samples: list[Sample], rounds: int) -> None:
    def detect(text: str) -> object:
        return module.find_secret(module.normalize_content(text))

    scores = score(detect, samples)
    print(f"\n## {label}\n")
    print(f"| {'category':32} | kind     | samples | flagged | rate  |")
    print(f"|{'-' * 34}|----------|---------|---------|-------|")
    for entry in scores:
        kind = "secret" if entry.secret else "innocent"
        print(f"| {entry.category:32} | {kind:8} | {entry.total:7} | {entry.flagged:7} | {entry.rate:.3f} |")
    print(f"\ndetection rate      {overall(scores, secret=True):.4f}  ({sum(s.total for s in scores if s.secret)} credentials)")
    print(f"false-positive rate {overall(scores, secret=False):.4f}  ({sum(s.total for s in scores if not s.secret)} innocent texts)")
    innocent, with_secret = documents(samples, secret=False), documents(samples, secret=True)
    print(f"time per KB, innocent text      {micros_per_kb(module.find_secret, innocent, rounds):7.1f} µs  ({len(innocent)} docs)")
    print(f"time per KB, ending in a secret {micros_per_kb(module.find_secret, with_secret, rounds):7.1f} µs  ({len(with_secret)} docs)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    samples = corpus(seed=args.seed)
    print("# Secret detection")
    print(f"\ncpu: {cpu_model()}, {usable_cpus()} usable; load average {load_average()}; "
          f"python {platform.python_version()}; product {product_revision()}; corpus seed {args.seed}")
    report("memories.pipeline.normalize (this checkout)", normalize, samples, args.rounds)
    if args.baseline:
        report(f"memories/pipeline/normalize.py at {args.baseline}", detector_at(args.baseline), samples, args.rounds)


if __name__ == "__main__":
    main()
