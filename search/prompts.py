"""The text of the session-start prompt: the hand-off pack and the inject block of a namespace."""
from __future__ import annotations

from search.handoff import handoff_pack
from search.inject import build_inject


def session_start(*, namespace: str, thread: str | None, query: str | None) -> str:
    """Standing context for a new session: with a ``thread``, its hand-off pack (profile, last turns,
    open items, topics, preferences); the inject block (categories, then the memories most useful
    for ``query``) unless the pack already says it all (a thread and no query)."""
    parts = []
    if thread:
        parts.append(handoff_pack(namespace=namespace, thread=thread)["content"])
    if query or not thread:
        parts.append(build_inject(namespace=namespace, query=query, gate=True, thread=thread)["content"])
    context = "\n".join(part.strip() for part in parts if part.strip())
    where = f'namespace "{namespace}"' + (f', thread "{thread}"' if thread else "")
    if not context:
        return (f"BHGBrain holds nothing for {where} yet. As we work, store decisions, facts and procedures "
                f'worth keeping with the `remember` tool (namespace "{namespace}").')
    return "\n".join([
        f"Context for this session from BHGBrain ({where}). Treat it as background you already know; do not "
        "repeat it back. Before answering questions about past work, `recall` or `search` for more; store new "
        f'decisions and facts with `remember` (namespace "{namespace}"'
        + (f', thread "{thread}"' if thread else "") + ").",
        "",
        context,
    ])
