"""BHGBrain for Django: project package (settings, config, errors, HTTP, CLI)."""

import os as _os

# The vector scan is one memory-bound matrix-vector product: extra BLAS threads do not speed it
# up but fight the embedding model's OpenMP threads for the cores (measured: query embedding
# p95 108 ms instead of 16 ms on 2 cores). Must be set before numpy is first imported.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
