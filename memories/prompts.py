"""The texts of the memories app's prompts (MCP prompts, offered by clients as slash commands):
the bootstrap interview and remember-this. Reads only; the model writes through the tools."""
from __future__ import annotations

from typing import Any

from memories.completions import tags_complete
from memories.interop import bootstrap

KNOWN_TAGS_SHOWN = 30


def _section_lines(namespace: str) -> tuple[list[str], int | None]:
    """Each section with its state, questions, collection and tier; the first one still pending."""
    status = {row["section"]: row for row in bootstrap.bootstrap_status(namespace=namespace)["sections"]}
    lines, first_pending = [], None
    for section in bootstrap.SECTIONS:
        row = status[section.number]
        done = row["status"] == "complete"
        if not done and first_pending is None:
            first_pending = section.number
        state = f"answered, {row['memory_count']} memories: skip unless I ask" if done else "to do"
        lines.append(f"{section.number}. {section.title} ({state}; collection {section.collection}, tier {section.tier})")
        lines.extend(f"   - {question}" for question in section.questions)
    return lines, first_pending


def bootstrap_interview(*, namespace: str, section: int | None) -> str:
    """The guided interview that fills the profile sections, from ``section`` (default: the first
    one not answered yet), with the current progress."""
    lines, first_pending = _section_lines(namespace)
    start = section or first_pending
    if start is None:
        opening = ("Every section is answered already. Summarise my profile from memory://inject and ask me which "
                   "section to revisit; to redo one, call `bootstrap` with action \"reset\" and that section first.")
    else:
        opening = f"Start with section {start} and go on in order."
    return "\n".join([
        f'Interview me to build my work profile in BHGBrain (namespace "{namespace}"): the second brain you and '
        "other assistants consult before answering questions about my work.",
        "",
        "How to run the interview:",
        f"- {opening}",
        "- One section at a time: ask its questions conversationally and follow up where an answer is vague "
        "(full names, owners, dates, which environment).",
        f'- When a section is answered, call the `bootstrap` tool with action "submit", namespace "{namespace}", '
        "the section number and `answers`: short self-contained paragraphs separated by blank lines, one fact "
        "each, in the third person. Each paragraph becomes a memory with the section's collection, tier and tags.",
        "- Never write down passwords, API keys or tokens (the server refuses them).",
        "- The tool answers with the next section; go on until it reports complete. Then give me a short "
        "structured summary of the profile and name anything ambiguous, as disambiguation rules for section 10.",
        "",
        "Sections:",
        *lines,
    ])


def remember_this(*, passage: str, namespace: str, collection: str | None, tag: str | None) -> str:
    """How to turn ``passage`` into well-formed memories, with the namespace's most used tags
    (and ``tag`` on every one)."""
    tags, _total = tags_complete(prefix="", namespace=namespace, limit=KNOWN_TAGS_SHOWN)
    where = f'namespace "{namespace}"' + (f', collection "{collection}"' if collection else "")
    known = ", ".join(tags) if tags else "none yet"
    return "\n".join([
        f"Turn the passage below into well-formed memories in BHGBrain ({where}) with the `remember` tool.",
        "",
        "- Split it into self-contained facts, decisions and procedures: one memory each, understandable "
        "without the passage (name people, systems and dates; no \"this\" or \"he\"). Leave out small talk "
        "and anything that will not matter in a month.",
        "- type: \"semantic\" for a fact or decision, \"episodic\" for something that happened (with its date), "
        "\"procedural\" for how to do something (steps in order).",
        "- tags: 1-5 short lowercase words or hyphenated phrases (letters, digits, \"-\"); reuse the namespace's "
        f"tags where they fit. Most used here: {known}."
        + (f' Give every one the tag "{tag}".' if tag else ""),
        "- importance 0-1: 0.9+ for rules and decisions others must follow, about 0.5 for useful context, "
        "0.2 for details.",
        "- A fact that changes over time (where someone lives, which system does a job): give it a `key` naming "
        "its slot (\"alice/home-city\") and `valid_from` when the passage says since when; the newest fact of a "
        "key is current and the older ones stay as its history.",
        "- Never store passwords, API keys or tokens. Identical content is stored once, so a retry is safe.",
        f"- Call `remember` with content, type, tags, importance and namespace \"{namespace}\""
        + (f', collection "{collection}"' if collection else "") + "; then list what you stored (id, summary).",
        "",
        "Passage:",
        "<passage>",
        passage,
        "</passage>",
    ])


def fact_history(history: dict[str, Any]) -> str:
    """One fact key's versions (memories/temporal/history.py shape) and what to make of them."""
    lines = []
    for version in history["versions"]:
        until = version["valid_until"] or "now"
        state = "current" if version["current"] else f"superseded by {version['superseded_by']}"
        why = version["superseded"] or {}
        reason = f", {why['reason']}" if why.get("reason") else ""
        lines.append(f"- {version['valid_from']} → {until} ({state}{reason}): {version['content']}")
    return "\n".join([
        f'The fact "{history["key"]}" in BHGBrain (namespace "{history["namespace"]}") has had these versions, '
        "oldest first (valid from → until):",
        *lines,
        "",
        "Say what is true now, and what changed when. To record a newer version, call `remember` with the same "
        "`key` (and `valid_from` if it changed earlier than today).",
    ])
