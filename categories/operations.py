"""The categories app's operation (the category tool) and the resources that read it."""
from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from pydantic import Field

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.contracts import CONTENT_MAX, SlotName
from bhgbrain_site.core.errors import InvalidInput
from bhgbrain_site.core.inputs import CategoryName, Input, Namespace
from bhgbrain_site.registry import Hints, completer, operation, resource
from categories import selectors, services
from categories.outputs import CategoryResult


class CategoryParams(Input):
    action: Literal["list", "get", "set", "delete"]
    namespace: Namespace | None = None
    name: CategoryName | None = None
    slot: SlotName = "custom"
    content: str | None = Field(default=None, min_length=1, max_length=CONTENT_MAX)


@operation("category", CategoryParams, writes=lambda p: p.action in ("set", "delete"), title="Policy categories",
           output=CategoryResult, hints=Hints(destructive=True))  # set keeps a revision; delete removes
def category(params: CategoryParams, ctx: CallContext) -> dict[str, Any]:
    """Manage policy categories: always-injected context blocks (company values,
    architecture, coding requirements, custom) at the top of memory://inject. Actions:
    list, get, set (creates or stores a new revision), delete. Scoped to the namespace."""
    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    if params.action == "list":
        return {"categories": selectors.categories_list(namespace=namespace)}
    if params.name is None:
        raise InvalidInput(f"name: required for action {params.action}", field="name")
    if params.action == "get":
        return selectors.category_get(namespace=namespace, name=params.name)
    if params.action == "delete":
        return services.category_delete(namespace=namespace, name=params.name, actor=ctx.actor)
    if params.content is None:
        raise InvalidInput("content: required for action set", field="content")
    return services.category_set(namespace=namespace, name=params.name, slot=params.slot, content=params.content,
                                 actor=ctx.actor)


resource("category://list", "Category list", "Policy categories of the namespace with previews (?namespace=)",
         operation="category", fixed={"action": "list"})
resource("category://{name}", "Category", "One category with its full content (?namespace=)",
         operation="category", fixed={"action": "get"})

completer("category", selectors.category_names_complete, resources={"category://{name}": "name"})
