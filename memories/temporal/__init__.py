"""Facts over time: versions of a fact, their validity, and what superseded what.

Public seams (other apps and helpers use only these): :func:`supersede`, :func:`fact_chain`,
:func:`normalise_key`; memories.remember's ``remember`` takes ``key``, ``supersedes`` and
``valid_from``. How a chain is shaped for the interfaces: memories/temporal/history.py.
"""
from __future__ import annotations

from memories.temporal.chains import fact_chain, supersede, valid_start
from memories.temporal.keys import normalise_key

__all__ = ["fact_chain", "normalise_key", "supersede", "valid_start"]
