"""The search app's part of the governance console: the memory list's search box runs the
product's hybrid search (search/console.py), lent to the memory admin, which may not import it."""
from __future__ import annotations

from memories.admin.scope import console
from search.console import memory_ids_ranked

console.search = memory_ids_ranked
