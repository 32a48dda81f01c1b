"""The index engines and their storage: the in-process base (load, discard, feed catch-up,
snapshots, eligibility), the embedded vector index and its HNSW partitions, Qdrant (dense +
sparse), snapshots and their digests, row files, and the change-feed reader."""
