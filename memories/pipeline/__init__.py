"""The steps of a write: normalise (secrets, summary, checksum), semantic dedup, tier assignment."""
