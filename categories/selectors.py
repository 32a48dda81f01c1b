"""Category reads."""
from __future__ import annotations

from typing import Any

from bhgbrain_site.core.errors import NotFound
from categories.models import Category
from memories.selectors import iso

PREVIEW_CHARS = 200


def category_to_dict(category: Category, *, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": category.name, "slot": category.slot}
    if full:
        out["content"] = category.content
    else:
        preview = category.content[:PREVIEW_CHARS]
        out["preview"] = preview + ("..." if len(category.content) > PREVIEW_CHARS else "")
    out.update(revision=category.revision, updated_at=iso(category.updated_at))
    return out


def categories_list(*, namespace: str) -> list[dict[str, Any]]:
    return [category_to_dict(c, full=False) for c in Category.objects.filter(namespace=namespace)]


def category_get(*, namespace: str, name: str) -> dict[str, Any]:
    category = Category.objects.filter(namespace=namespace, name=name).first()
    if category is None:
        raise NotFound(f'Category "{name}" not found')
    return category_to_dict(category, full=True)


def categories_for_inject(*, namespace: str) -> list[Category]:
    return list(Category.objects.filter(namespace=namespace))


def category_names_complete(*, prefix: str, namespace: str, limit: int) -> tuple[list[str], int]:
    """Category names of the namespace starting with ``prefix`` (completion), most revised first."""
    rows = Category.objects.filter(namespace=namespace, name__startswith=prefix)
    names = list(rows.order_by("-revision", "name").values_list("name", flat=True)[:limit])
    return names, len(names) if len(names) < limit else rows.count()
