"""The categories app's result models (the category tool): MCP ``outputSchema`` and OpenAPI."""
from __future__ import annotations

from typing import Literal

from pydantic import RootModel

from bhgbrain_site.core.contracts import SlotName
from bhgbrain_site.core.outputs import Output, Stamp


class CategoryView(Output):
    """get and set: the category in full."""

    name: str
    slot: SlotName
    content: str
    revision: int
    updated_at: Stamp


class CategoryPreview(Output):
    name: str
    slot: SlotName
    preview: str
    revision: int
    updated_at: Stamp


class CategoryList(Output):
    """list: every category of the namespace, with a preview."""

    categories: list[CategoryPreview]


class CategoryDeleted(Output):
    ok: Literal[True]
    name: str


class CategoryResult(RootModel[CategoryList | CategoryView | CategoryDeleted]):
    """category: by action (list, get, set, delete)."""
