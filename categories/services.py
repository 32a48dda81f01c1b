"""Category writes: set (create or new revision) and delete, each audited."""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.errors import NotFound
from categories.models import Category, CategoryRevision
from categories.selectors import category_to_dict
from memories import funnel
from memories.pipeline import normalize


def category_set(*, namespace: str, name: str, slot: str, content: str, actor: str) -> dict[str, Any]:
    """Create the category or store a new revision of it (the old content is kept)."""
    text = normalize.normalize_content(content)
    normalize.reject_secrets(text)
    now = timezone.now()
    with transaction.atomic():
        category = Category.objects.select_for_update().filter(namespace=namespace, name=name).first()
        if category is None:
            category = Category.objects.create(namespace=namespace, name=name, slot=slot, content=text, updated_at=now)
        else:
            CategoryRevision.objects.create(
                category=category, revision=category.revision, content=category.content, updated_at=now, updated_by=actor
            )
            category.slot, category.content, category.updated_at = slot, text, now
            category.revision += 1
            category.save()
        funnel.record_audit(operation="CATEGORY_SET", actor=actor, namespace=namespace, at=now,
                            details={"name": name, "slot": slot, "revision": category.revision})
    return category_to_dict(category, full=True)


def category_delete(*, namespace: str, name: str, actor: str) -> dict[str, Any]:
    """Delete a category (its revisions go with it); audited."""
    with transaction.atomic():
        category = Category.objects.select_for_update().filter(namespace=namespace, name=name).first()
        if category is None:
            raise NotFound(f'Category "{name}" not found')
        category.delete()
        funnel.record_audit(operation="CATEGORY_DELETE", actor=actor, namespace=namespace,
                            details={"name": name, "revision": category.revision})
    return {"ok": True, "name": name}
