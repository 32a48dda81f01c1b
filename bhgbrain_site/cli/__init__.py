"""The ``bhgbrain`` command (``main``), its store commands and ``store migrate``."""
