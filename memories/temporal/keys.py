"""Fact keys: the namespace-scoped slot a fact fills ("alice/home-city"), as free text."""
from __future__ import annotations

from bhgbrain_site.core.contracts import FACT_KEY_MAX
from bhgbrain_site.core.errors import InvalidInput


def normalise_key(raw: str) -> str:
    """The stored form of a fact key: stripped, inner whitespace collapsed to one space, casefolded
    ("  Alice/Home  City " → "alice/home city"). Empty or longer than FACT_KEY_MAX: INVALID_INPUT."""
    key = " ".join(str(raw).split()).casefold()
    if not key:
        raise InvalidInput("key: must not be empty", field="key")
    if len(key) > FACT_KEY_MAX:
        raise InvalidInput(f"key: at most {FACT_KEY_MAX} characters", field="key")
    return key
