"""Ground: what every layer may import. Config, the error hierarchy and its envelope, the
seed's contracts, the call types (``Principal``, ``CallContext``, ``Progress``), input and output
model blocks, log format, metrics, thread pools, shared caches, SQLite upkeep, DRF and admin glue.
Imports nothing of the apps."""
