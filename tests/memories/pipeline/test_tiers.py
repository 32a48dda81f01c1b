"""Tier assignment chain and per-tier lifecycle metadata (pure functions, no DB)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bhgbrain_site.core.config import TierValues
from memories.pipeline.tiers import assign_tier, has_t0_signal, is_transient, more_durable, tier_metadata

NEUTRAL = "Deploys go out from the main branch after CI passes."


def tier(
    content: str = NEUTRAL,
    *,
    tags: list[str] | None = None,
    source: str = "api",
    memory_type: str = "semantic",
    category: str | None = None,
    explicit_tier: str | None = None,
) -> str:
    return assign_tier(
        content=content,
        tags=tags or [],
        source=source,
        memory_type=memory_type,
        category=category,
        explicit_tier=explicit_tier,
    )


# --------------------------------------------------------------------------- rule 7: default

@pytest.mark.parametrize("source", ["api", "import", "agent"])
def test_default_is_t2(source: str) -> None:
    assert tier(NEUTRAL, source=source, memory_type="semantic") == "T2"


# --------------------------------------------------------------------------- rule 1: explicit tier

@pytest.mark.parametrize("explicit", ["T0", "T1", "T2", "T3"])
def test_explicit_tier_is_used(explicit: str) -> None:
    assert tier(NEUTRAL, explicit_tier=explicit) == explicit


def test_explicit_tier_beats_category() -> None:
    assert tier(NEUTRAL, category="company-values", explicit_tier="T3") == "T3"


def test_explicit_tier_beats_agent_procedural() -> None:
    assert tier(NEUTRAL, source="agent", memory_type="procedural", explicit_tier="T3") == "T3"


def test_explicit_tier_beats_transient_signal() -> None:
    assert tier("Standup notes for today", explicit_tier="T0") == "T0"


def test_explicit_tier_beats_t0_keyword() -> None:
    assert tier("Architecture overview of the billing service", explicit_tier="T2") == "T2"


# --------------------------------------------------------------------------- rule 2: category

def test_category_gives_t0() -> None:
    assert tier(NEUTRAL, category="architecture") == "T0"


def test_category_beats_agent_procedural() -> None:
    assert tier(NEUTRAL, source="agent", memory_type="procedural", category="runbooks") == "T0"


def test_category_beats_agent_episodic() -> None:
    assert tier(NEUTRAL, source="agent", memory_type="episodic", category="team") == "T0"


def test_category_beats_cli() -> None:
    assert tier(NEUTRAL, source="cli", category="team") == "T0"


def test_category_beats_transient_signal() -> None:
    assert tier("JIRA-1234 due by friday", category="team") == "T0"


# --------------------------------------------------------------------------- rule 3: source/type

def test_agent_procedural_is_t1() -> None:
    assert tier(NEUTRAL, source="agent", memory_type="procedural") == "T1"


def test_agent_episodic_is_t2() -> None:
    assert tier(NEUTRAL, source="agent", memory_type="episodic") == "T2"


def test_agent_procedural_beats_transient_and_keywords() -> None:
    assert tier("Security runbook reviewed in standup today", source="agent", memory_type="procedural") == "T1"


def test_agent_episodic_beats_t0_keyword() -> None:
    assert tier("Architecture review of the payments schema", source="agent", memory_type="episodic") == "T2"


def test_agent_episodic_beats_transient_pattern() -> None:
    assert tier("Fixed JIRA-1234 today", source="agent", memory_type="episodic") == "T2"


@pytest.mark.parametrize("memory_type", ["semantic", "episodic", "procedural"])
def test_cli_is_t2_for_any_type(memory_type: str) -> None:
    assert tier(NEUTRAL, source="cli", memory_type=memory_type) == "T2"


def test_cli_short_circuits_t0_keyword_in_content() -> None:
    assert tier("Architecture decision: the API contract is versioned", source="cli") == "T2"


def test_cli_short_circuits_t0_keyword_in_tags() -> None:
    assert tier(NEUTRAL, source="cli", tags=["security", "compliance"]) == "T2"


def test_cli_short_circuits_transient_pattern() -> None:
    assert tier("Action items from the standup: close JIRA-42", source="cli") == "T2"


@pytest.mark.parametrize("source", ["api", "import"])
def test_procedural_from_other_sources_is_not_t1(source: str) -> None:
    # Only the agent source maps procedural to T1; others fall through to the later rules.
    assert tier(NEUTRAL, source=source, memory_type="procedural") == "T2"
    assert tier("Runbook: restart the queue workers", source=source, memory_type="procedural") == "T0"


def test_agent_semantic_falls_through_to_keywords() -> None:
    assert tier("Compliance requires 7-year retention", source="agent", memory_type="semantic") == "T0"


def test_agent_semantic_falls_through_to_transient() -> None:
    assert tier("Meeting minutes from the sync", source="agent", memory_type="semantic") == "T3"


# --------------------------------------------------------------------------- rule 4: transient -> T3

TRANSIENT_CASES = {
    "jira-key": "Fix flaky login test (JIRA-1234)",
    "short-project-key": "Blocked on OPS-7 until the vendor replies",
    "alnum-project-key": "See BHG2-88 for the repro",
    "incident-dash": "Postmortem notes for incident-456",
    "incident-hash": "Root cause of incident #457 was a full disk",
    "case-dash": "Customer escalation case-789",
    "case-space": "Support case 790 was reopened",
    "ticket-hash": "Linked ticket#12 to the release",
    "email-from": "From: alice@example.com\nPlease review the draft",
    "email-subject": "Subject: Q&A follow-up\nThanks all",
    "email-subject-later-line": "Forwarded below\nSubject: launch plan",
    "email-fw": "fw: vendor pricing sheet",
    "email-fwd": "Fwd: offsite agenda",
    "email-re": "re: the migration window",
    "email-RE-upper": "RE: Budget numbers",
    "today": "Need to finish the migration today",
    "this-week": "Focus this week is the search rewrite",
    "by-friday": "Ship the hotfix by Friday",
    "standup": "Notes from standup",
    "stand-up": "Discussed in the stand-up",
    "meeting-minutes": "Meeting minutes: roadmap sync",
    "action-items": "Action items: update the dashboard",
    "action-item-singular": "One action item remains open",
    "quarter-q1-2026": "Targets for Q1 2026",
    "quarter-lower": "revenue dip in q3 2025",
    "quarter-short-year": "Hiring plan Q4'26",
    "quarter-fy": "Goals for Q2 FY26",
}


@pytest.mark.parametrize("content", list(TRANSIENT_CASES.values()), ids=list(TRANSIENT_CASES))
def test_transient_patterns_give_t3(content: str) -> None:
    assert is_transient(content)
    assert tier(content, source="api") == "T3"


@pytest.mark.parametrize("source", ["api", "import"])
def test_transient_applies_to_api_and_import(source: str) -> None:
    assert tier("Sprint review JIRA-99", source=source) == "T3"


@pytest.mark.parametrize(
    "content",
    [
        "Architecture sync notes for today",
        "Security review of JIRA-1234",
        "Design decision recorded in the standup",
        "Compliance deadline for Q1 2026",
        "Subject: new retention policy",
        "Runbook gap found during incident-456",
    ],
)
def test_transient_beats_t0_keyword(content: str) -> None:
    assert has_t0_signal(content, [])  # the keyword is really there ...
    assert tier(content, source="api") == "T3"  # ... but transient is checked first


def test_transient_beats_t0_keyword_in_tags() -> None:
    assert tier("Notes from standup", tags=["architecture"]) == "T3"


# --------------------------------------------------------------------------- ticket-key guards

@pytest.mark.parametrize(
    "content",
    [
        "Checksums use SHA-256 hex digests",
        "SHA-1 is no longer acceptable",
        "All files are UTF-8 encoded",
        "Windows tools sometimes emit UTF-16",
        "Payloads are encrypted with AES-256",
        "Timestamps are ISO-8601 strings",
        "Requirements keywords follow RFC-2119 wording",
        "Only TLS-1 era ciphers were removed",
        "Tokens are signed with RS-256 or ES-256",
        "Our Python style follows PEP-8",
        "Legacy exports are CP-1252 encoded",
    ],
)
def test_standards_are_not_ticket_keys(content: str) -> None:
    assert not is_transient(content)


@pytest.mark.parametrize(
    "content",
    [
        "lowercase jira-1234 is not a key",  # keys are upper case
        "A-1 is too short for a project key",  # single-letter prefix
        "ABCDEFGHIJK-12 has an over-long prefix",  # 11-character prefix
        "version v2-3 of the plan",
    ],
)
def test_ticket_key_shape_limits(content: str) -> None:
    assert not is_transient(content)


def test_sha256_with_t0_keyword_is_t0_not_t3() -> None:
    assert tier("Security standard: store SHA-256 checksums of every artefact") == "T0"


def test_utf8_content_is_default_t2() -> None:
    assert tier("All exports are UTF-8 without a BOM") == "T2"


@pytest.mark.parametrize(
    "content",
    [
        "Prefer lowercase file names",  # "from"/"re" inside words are not headers
        "We are: committed to uptime",  # "re:" inside "are:"
        "Data from: the sensor feed",  # "from:" mid-line is not a header
        "Quarterly planning happens in spring",
        "Caseload is tracked per team",
        "Tomorrowland is a festival",  # word boundary on "tomorrow"
    ],
)
def test_transient_false_positive_guards(content: str) -> None:
    assert not is_transient(content)


# --------------------------------------------------------------------------- rules 5/6: T0 keywords

T0_KEYWORD_CASES = [
    "The architecture is event driven",
    "Design decision: use Postgres",
    "Design decisions are logged weekly",
    "ADR: adopt structured logging",
    "All ADRs live in docs/adr",
    "RFC for the new sync protocol",
    "The API contract is versioned",
    "Vendor contracts renew annually",
    "The schema has a tenants table",
    "Legal approved the wording",
    "Compliance requires audit logs",
    "Retention policy is seven years",
    "These policies apply company wide",
    "Coding standard: black formatting",
    "Accounting closes on the fifth",
    "Security review required for auth changes",
    "Runbook: restart the workers",
    "RUNBOOKS are in the wiki",
]


@pytest.mark.parametrize("content", T0_KEYWORD_CASES)
def test_t0_keyword_in_content_gives_t0(content: str) -> None:
    assert tier(content, source="api") == "T0"


@pytest.mark.parametrize("source", ["api", "import"])
def test_t0_keyword_applies_to_api_and_import(source: str) -> None:
    assert tier("Architecture overview", source=source) == "T0"


@pytest.mark.parametrize(
    "tags",
    [
        ["security"],
        ["ops", "runbook"],
        ["design-decision"],  # hyphenated tag reads as "design decision"
        ["Compliance"],
        ["api", "schema"],
        ["legal"],
    ],
)
def test_t0_keyword_in_tags_gives_t0(tags: list[str]) -> None:
    assert tier(NEUTRAL, tags=tags, source="api") == "T0"


@pytest.mark.parametrize(
    "tags",
    [
        ["ops", "deploys"],
        ["securityish"],  # keyword must be a whole word
        ["architectures-notes-x"],  # "architectures" is not in the list
        [],
    ],
)
def test_non_keyword_tags_stay_default(tags: list[str]) -> None:
    assert tier(NEUTRAL, tags=tags, source="api") == "T2"


@pytest.mark.parametrize(
    "content",
    [
        "Securities trading desk notes",  # "securities" is not "security"
        "Contractors start on Monday",  # "contractors" is not "contract"
        "Standardized onboarding checklist",  # "standardized" is not "standard"
        "Adrenaline is not a keyword",  # "adr" only as a whole word
    ],
)
def test_keyword_must_be_whole_word(content: str) -> None:
    assert not has_t0_signal(content, [])
    assert tier(content, source="api") == "T2"


# --------------------------------------------------------------------------- more_durable

@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [("T0", "T3", "T0"), ("T3", "T0", "T0"), ("T1", "T2", "T1"), ("T2", "T1", "T1"), ("T2", "T3", "T2"), ("T2", "T2", "T2")],
)
def test_more_durable(a: str, b: str, expected: str) -> None:
    assert more_durable(a, b) == expected


# --------------------------------------------------------------------------- tier_metadata

ANCHOR = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
TTL = TierValues(T0=None, T1=365, T2=90, T3=30)


def test_t0_never_expires() -> None:
    meta = tier_metadata("T0", anchor=ANCHOR, ttl=TTL)
    assert meta.expires_at is None
    assert meta.decay_eligible is False
    assert meta.review_due is None


def test_t0_never_expires_even_with_a_configured_ttl() -> None:
    meta = tier_metadata("T0", anchor=ANCHOR, ttl=TierValues(T0=10, T1=365, T2=90, T3=30))
    assert meta.expires_at is None
    assert meta.decay_eligible is False
    assert meta.review_due is None


def test_t1_expires_and_is_reviewed_after_t1_ttl() -> None:
    meta = tier_metadata("T1", anchor=ANCHOR, ttl=TTL)
    assert meta.expires_at == ANCHOR + timedelta(days=365)
    assert meta.review_due == ANCHOR + timedelta(days=365)
    assert meta.decay_eligible is True


def test_t1_uses_the_configured_ttl() -> None:
    meta = tier_metadata("T1", anchor=ANCHOR, ttl=TierValues(T1=180, T2=90, T3=30))
    assert meta.expires_at == datetime(2026, 8, 28, 12, 30, tzinfo=UTC)
    assert meta.review_due == datetime(2026, 8, 28, 12, 30, tzinfo=UTC)


def test_t2_expires_after_t2_ttl_without_review() -> None:
    meta = tier_metadata("T2", anchor=ANCHOR, ttl=TTL)
    assert meta.expires_at == datetime(2026, 5, 30, 12, 30, tzinfo=UTC)  # +90 days
    assert meta.review_due is None
    assert meta.decay_eligible is True


def test_t3_expires_after_t3_ttl_without_review() -> None:
    meta = tier_metadata("T3", anchor=ANCHOR, ttl=TTL)
    assert meta.expires_at == datetime(2026, 3, 31, 12, 30, tzinfo=UTC)  # +30 days
    assert meta.review_due is None
    assert meta.decay_eligible is True


def test_each_tier_reads_its_own_ttl() -> None:
    ttl = TierValues(T1=11, T2=22, T3=33)
    assert tier_metadata("T1", anchor=ANCHOR, ttl=ttl).expires_at == ANCHOR + timedelta(days=11)
    assert tier_metadata("T2", anchor=ANCHOR, ttl=ttl).expires_at == ANCHOR + timedelta(days=22)
    assert tier_metadata("T3", anchor=ANCHOR, ttl=ttl).expires_at == ANCHOR + timedelta(days=33)


def test_default_ttl_config_values() -> None:
    defaults = TierValues()
    assert tier_metadata("T1", anchor=ANCHOR, ttl=defaults).expires_at == ANCHOR + timedelta(days=365)
    assert tier_metadata("T2", anchor=ANCHOR, ttl=defaults).expires_at == ANCHOR + timedelta(days=90)
    assert tier_metadata("T3", anchor=ANCHOR, ttl=defaults).expires_at == ANCHOR + timedelta(days=30)
    assert tier_metadata("T0", anchor=ANCHOR, ttl=defaults).expires_at is None


def test_metadata_keeps_the_anchor_timezone() -> None:
    meta = tier_metadata("T3", anchor=ANCHOR, ttl=TTL)
    assert meta.expires_at is not None
    assert meta.expires_at.tzinfo is not None
    assert meta.expires_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("null_tier", ["T1", "T2", "T3"])
def test_null_ttl_means_never_expires(null_tier: str) -> None:
    values = {"T1": 365, "T2": 90, "T3": 30, null_tier: None}
    ttl = TierValues(**values)
    meta = tier_metadata(null_tier, anchor=ANCHOR, ttl=ttl)
    assert meta.expires_at is None
    assert meta.decay_eligible is False
    assert meta.review_due is None


def test_null_ttl_only_affects_its_own_tier() -> None:
    ttl = TierValues(T1=365, T2=None, T3=30)
    assert tier_metadata("T2", anchor=ANCHOR, ttl=ttl).expires_at is None
    t3 = tier_metadata("T3", anchor=ANCHOR, ttl=ttl)
    assert t3.expires_at == ANCHOR + timedelta(days=30)
    assert t3.decay_eligible is True
    t1 = tier_metadata("T1", anchor=ANCHOR, ttl=ttl)
    assert t1.review_due == ANCHOR + timedelta(days=365)


def test_all_null_ttl_config_never_expires_anything() -> None:
    ttl = TierValues(T0=None, T1=None, T2=None, T3=None)
    for name in ("T0", "T1", "T2", "T3"):
        meta = tier_metadata(name, anchor=ANCHOR, ttl=ttl)
        assert (meta.expires_at, meta.decay_eligible, meta.review_due) == (None, False, None), name


@pytest.mark.parametrize(
    "content",
    ["in case 3 servers fail we page the on-call", "ADR-012: use Postgres for the ledger"],
)
def test_prose_and_adr_numbers_are_not_tickets(content: str) -> None:
    from memories.pipeline.tiers import is_transient

    assert not is_transient(content)


# --------------------------------------------------------------------------- the seed's bootstrap rule

@pytest.mark.parametrize("content", [NEUTRAL, "Daily standup at 9:30, then deep work until noon"])
def test_imported_bootstrap_profile_is_t0(content: str) -> None:
    """"Bootstrap memories default to T0": source import with tags bootstrap and profile,
    even when the words look transient (a profile's routine is not a ticket)."""
    assert tier(content, source="import", tags=["bootstrap", "profile"]) == "T0"
    assert tier(content, source="import", tags=["identity", "Profile", "BOOTSTRAP"]) == "T0"


@pytest.mark.parametrize(("source", "tags"), [
    ("import", ["bootstrap"]),
    ("import", ["profile"]),
    ("api", ["bootstrap", "profile"]),
    ("agent", ["bootstrap", "profile"]),
])
def test_bootstrap_rule_needs_an_import_with_both_tags(source: str, tags: list[str]) -> None:
    assert tier(NEUTRAL, source=source, tags=tags) == "T2"


def test_explicit_tier_beats_the_bootstrap_rule() -> None:
    assert tier(NEUTRAL, source="import", tags=["bootstrap", "profile"], explicit_tier="T2") == "T2"


@pytest.mark.django_db
def test_remember_an_imported_profile_memory_gives_t0(hash_embedder) -> None:  # noqa: ANN001
    from bhgbrain_site.core.calls import CallContext
    from bhgbrain_site.registry import call_tool

    ctx = CallContext(actor="test")
    profile = call_tool("remember", {"content": "I run the platform team; standup is at 9:30 every day",
                                     "source": "import", "tags": ["bootstrap", "profile"]}, ctx)
    assert (profile["retention_tier"], profile["expires_at"]) == ("T0", None)
    partial = call_tool("remember", {"content": "I run the data team; standup is at 10:00 every day",
                                     "source": "import", "tags": ["profile"]}, ctx)
    assert partial["retention_tier"] == "T3"  # one tag is not the bootstrap signal: the transient rule applies
