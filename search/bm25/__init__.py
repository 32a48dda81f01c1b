"""The full-text engine: the in-process BM25 index (an ``InProcessIndex``), exact top-k
(MaxScore) and its compiled kernels."""
