"""BHGBrain for Django: project package (settings, config, errors, HTTP, CLI)."""

import os as _os

# The vector scan is one memory-bound matrix-vector product: extra BLAS threads do not speed it
# up but fight the embedding model's OpenMP threads for the cores (measured: query embedding
# p95 108 ms instead of 16 ms on 2 cores). Must be set before numpy is first imported.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The local model runs one OpenMP team per call (embedding.threads). libgomp's default wait at
# its barriers spins for ~300k iterations: fine on an idle machine, catastrophic when another
# process holds a core (measured, 2 threads, both cores busy: query p95 1.7 s). A short spin
# keeps the idle speed-up (query p95 13 ms vs 21 ms with one thread) and bounds the busy case
# (both cores busy: p95 36 ms vs 44 ms with one thread; one core busy: 35 vs 29). docs/embeddings.md.
_os.environ.setdefault("GOMP_SPINCOUNT", "1000")
