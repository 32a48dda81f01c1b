"""What curators work with: their namespaces, their edits, the review queues and dedup merges."""
