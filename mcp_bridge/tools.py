"""Tool definitions: pydantic inputs with the seed's limits, thin calls into services."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from mcp_bridge.registry import CallContext, tool
from memories import services

Namespace = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9/-]{1,200}$")]
CollectionName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9-]{1,100}$")]
Tag = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9-]+$", min_length=1, max_length=100)]
MemoryType = Literal["episodic", "semantic", "procedural"]
Tier = Literal["T0", "T1", "T2", "T3"]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RememberParams(_Input):
    content: str = Field(min_length=1, max_length=100_000)
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    type: MemoryType = "semantic"
    tags: list[Tag] = Field(default_factory=list, max_length=20)
    category: str | None = Field(default=None, min_length=1, max_length=100)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    source: Literal["cli", "api", "agent", "import"] = "cli"
    retention_tier: Tier | None = None


class ForgetParams(_Input):
    id: str = Field(min_length=1, max_length=64)
    namespace: Namespace | None = None


@tool("remember", RememberParams)
def remember(params: RememberParams, ctx: CallContext) -> dict[str, Any]:
    """Store a memory. Content is normalised, checked for secrets, deduplicated (exact
    checksum, then semantic similarity within the collection) and given a retention tier
    (T0 foundational … T3 transient). Returns the id and operation: ADD, UPDATE (merged
    into a near-duplicate; merged_with_id) or NOOP (already known)."""
    defaults = settings.BHGBRAIN.defaults
    data = services.RememberInput(
        content=params.content,
        namespace=params.namespace or defaults.namespace,
        collection=params.collection or defaults.collection,
        type=params.type,
        tags=tuple(params.tags),
        category=params.category,
        importance=params.importance,
        source=params.source,
        retention_tier=params.retention_tier,
    )
    return services.memory_remember(data=data, actor=ctx.actor).as_dict()


@tool("forget", ForgetParams)
def forget(params: ForgetParams, ctx: CallContext) -> dict[str, Any]:
    """Permanently delete one memory by id (NOT_FOUND if it does not exist, is archived,
    or belongs to another namespace than the one given)."""
    return services.memory_forget(memory_id=params.id, namespace=params.namespace, actor=ctx.actor)
