"""BM25 full-text search (SQLite FTS5 / PostgreSQL tsvector): ranking, analysis, safety, filters, sync."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memories import embeddings
from memories.access import tracker
from memories.analyzer import analyze, analyze_query
from memories.indexes import embedded
from memories.models import Memory
from memories.services import memory_forget
from search.selectors import Scored, fulltext_hits, memories_search
from tests.conftest import HashEmbedder, remember

pytestmark = pytest.mark.django_db

FILLERS = [
    "The cafeteria serves lunch at noon",
    "Bob prefers tabs over spaces in Python code",
    "The VPN requires two factor login from home",
    "Quarterly report numbers are due soon",
    "The printer on floor three is broken again",
    "Coffee machine gets cleaned every Friday",
    "Parking passes are renewed in January",
    "Team photos will be taken next month",
]


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def ft(query: str, *, namespace: str = "global", collection: str | None = None, limit: int = 50) -> list[Scored]:
    return fulltext_hits(query, namespace=namespace, collection=collection, limit=limit, now=timezone.now())


def ids(items: list[Scored]) -> list[str]:
    return [i.memory_id for i in items]


def add_fillers(**fields: object) -> list[str]:
    return [remember(text, **fields).id for text in FILLERS]


# --------------------------------------------------------------------------- ranking


def test_memory_matching_more_query_terms_ranks_first(hash_embedder) -> None:
    add_fillers()
    both = remember("The billing service runs on Kubernetes").id
    one = remember("The billing team sends invoices by email").id
    hits = ft("billing kubernetes")
    assert ids(hits)[:2] == [both, one]
    assert hits[0].score > hits[1].score


def test_memory_matching_rarer_term_ranks_higher(hash_embedder) -> None:
    add_fillers()
    common = [remember(f"The {name} service is owned by the platform group").id for name in ("search", "mail", "auth")]
    rare = remember("Kafka topics keep messages for seven days").id
    hits = ft("service kafka")
    assert ids(hits)[0] == rare
    assert set(ids(hits)) == {rare, *common}


def test_tags_are_indexed(hash_embedder) -> None:
    add_fillers()
    tagged = remember("Rollouts happen in small batches", tags=["kubernetes", "zero-downtime"]).id
    assert ids(ft("kubernetes")) == [tagged]
    assert ids(ft("downtime")) == [tagged]  # hyphenated tags are split into words


@pytest.mark.parametrize("query", ["deploying", "deploys", "deploy", "DEPLOYED"])
def test_stemming_matches_inflections(hash_embedder, query: str) -> None:
    add_fillers()
    deployed = remember("We deployed the new release to production").id
    assert ids(ft(query)) == [deployed]


@pytest.mark.parametrize("query", ["the", "the and of", "what is it", "How do I", "   ", "!!! ??? ..."])
def test_stopword_or_punctuation_only_query_returns_nothing(hash_embedder, query: str) -> None:
    remember("The and of what is it how do I")  # even a memory made of stopwords is not matched
    add_fillers()
    assert ft(query) == []
    assert memories_search(query=query, namespace="global", collection=None, mode="fulltext", limit=10) == []


def test_fulltext_score_is_normalised_best_is_one(hash_embedder) -> None:
    add_fillers()
    remember("The billing service runs on Kubernetes")
    remember("The billing team sends invoices by email")
    remember("Billing billing billing: invoices, billing runs, billing Kubernetes")
    hits = ft("billing kubernetes invoices")
    assert len(hits) == 3
    scores = [h.fulltext for h in hits]
    assert scores[0] == pytest.approx(1.0)
    assert all(s is not None and 0.0 < s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    results = memories_search(query="billing kubernetes invoices", namespace="global", collection=None, mode="fulltext", limit=10)
    assert [r.fulltext for r in results][0] == pytest.approx(1.0)
    assert all(r.semantic is None and 0.0 < r.score <= 1.0 for r in results)


def test_limit_is_respected(hash_embedder) -> None:
    for i in range(8):
        remember(f"Reminder number {i}: rotate the staging certificates")
    assert len(ft("certificates", limit=3)) == 3
    assert len(memories_search(query="certificates", namespace="global", collection=None, mode="fulltext", limit=5)) == 5


# --------------------------------------------------------------------------- CJK


def test_chinese_query_finds_chinese_memory(hash_embedder) -> None:
    add_fillers()
    auth = remember("我们的认证服务使用JWT令牌").id
    backup = remember("数据库每天凌晨两点备份").id
    assert ids(ft("认证服务")) == [auth]
    assert ids(ft("数据库备份")) == [backup]


@pytest.mark.parametrize("query", ["JWT 令牌", "jwt令牌", "认证 JWT", "令牌"])
def test_mixed_chinese_english_query(hash_embedder, query: str) -> None:
    add_fillers()
    auth = remember("我们的认证服务使用JWT令牌").id
    remember("数据库每天凌晨两点备份")
    assert ids(ft(query)) == [auth]


def test_english_query_finds_english_word_inside_chinese_text(hash_embedder) -> None:
    auth = remember("我们的认证服务使用JWT令牌").id
    remember("The session cookie is signed")
    assert ids(ft("JWT")) == [auth]


# --------------------------------------------------------------------------- hostile queries

HOSTILE = [
    '"',
    '""',
    "'",
    "%",
    "_",
    "*",
    "-",
    ":",
    "(",
    ")",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(a b)",
    "content:foo",
    '"JIRA-1234"',
    "a AND (b OR",
    "🚀🔥 deploy 🎉",
    "\x00",
    "foo\x00bar",
    "x" * 500,
    "tok " * 125,
    "a" + "(" * 499,
    "'; DROP TABLE memories; --",
    "\"; DELETE FROM memories_fts; --",
    "memory_id:1 OR 1=1",
    "scope : ns AND co",
    "{content tags} : foo",
    "^foo",
    "foo* bar^ {baz} [qux]",
    "\\",
    "认证\" OR \"1\"=\"1",
]


def _seed_hostile() -> dict[str, str]:
    return {
        "jira": remember("Ticket JIRA-1234 tracks the login bug on the portal").id,
        "foo": remember("foo bar baz are placeholder names").id,
        "near": remember("The office is near the station").id,
        "other": remember("Lunch is served at noon in the cafeteria").id,
        "drop": remember("Never drop a table of memories without a backup").id,
    }


def _terms_of(memory: Memory) -> set[str]:
    tags = " ".join(t.replace("-", " ") for t in memory.tags)
    return set(analyze(memory.content + " " + tags))


@pytest.mark.parametrize("mode", ["fulltext", "hybrid"])
@pytest.mark.parametrize("query", HOSTILE, ids=lambda q: repr(q)[:40])
def test_hostile_query_never_raises_nor_injects(e5, query: str, mode: str) -> None:
    seeded = _seed_hostile()
    count = Memory.objects.count()
    results = memories_search(query=query, namespace="global", collection=None, mode=mode, limit=50)
    terms = set(analyze_query(query))
    # Only memories sharing an analysed word with the query come from the full-text side.
    for item in results:
        if item.fulltext is not None:
            assert terms & _terms_of(item.memory), (query, item.memory.content)
    if mode == "fulltext":
        expected = {mid for mid in seeded.values() if terms & _terms_of(Memory.objects.get(pk=mid))}
        assert {r.memory_id for r in results} == expected
    # Nothing was changed or dropped, and the index still answers.
    assert Memory.objects.count() == count
    assert ids(ft("login portal")) == [seeded["jira"]]
    assert ids(ft("cafeteria")) == [seeded["other"]]


def test_sql_injection_leaves_table_and_index_intact(hash_embedder) -> None:
    seeded = _seed_hostile()
    hits = ft("'; DROP TABLE memories; --")
    assert ids(hits) == [seeded["drop"]]  # matched as plain words: drop, table, memories
    assert "memories" in connection.introspection.table_names()
    assert Memory.objects.count() == 5
    assert ids(ft("JIRA-1234")) == [seeded["jira"]]
    assert ids(ft("placeholder")) == [seeded["foo"]]


def test_operator_words_in_content_are_indexed_as_words(hash_embedder) -> None:
    tricky = remember('He said "hello" AND (goodbye) OR NOT* near:col - content:foo').id
    remember("Completely unrelated sentence about weather")
    assert ids(ft("goodbye")) == [tricky]
    assert ids(ft("hello")) == [tricky]
    assert ids(ft("col")) == [tricky]


# --------------------------------------------------------------------------- filters


def test_namespace_isolation(hash_embedder) -> None:
    alice = remember("Project Bluebird launches in spring", namespace="alice").id
    bob = remember("Bluebird is the name of the cafe downstairs", namespace="bob").id
    remember("Bluebird sightings log", namespace="alice/team")
    assert ids(ft("bluebird", namespace="bob")) == [bob]
    assert ids(ft("bluebird launches spring", namespace="bob")) == [bob]
    assert ids(ft("bluebird", namespace="alice")) == [alice]
    assert ft("bluebird", namespace="carol") == []
    for mode in ("fulltext", "hybrid"):
        found = memories_search(query="Project Bluebird launches", namespace="bob", collection=None, mode=mode, limit=50)
        assert alice not in ids(found)
        assert all(r.memory.namespace == "bob" for r in found)


def test_collection_filter(hash_embedder) -> None:
    work = remember("Release train leaves every Tuesday", collection="work").id
    home = remember("Garbage train schedule: bins out Tuesday", collection="home").id
    assert ids(ft("tuesday train", collection="work")) == [work]
    assert ids(ft("tuesday train", collection="home")) == [home]
    assert set(ids(ft("tuesday train"))) == {work, home}
    assert ft("tuesday train", collection="nope") == []
    found = memories_search(query="tuesday", namespace="global", collection="home", mode="hybrid", limit=10)
    assert ids(found) == [home]


def test_archived_memory_never_appears(hash_embedder) -> None:
    add_fillers()
    gone = remember("The legacy mainframe was decommissioned").id
    kept = remember("The mainframe room is now a meeting room").id
    Memory.objects.filter(pk=gone).update(archived=True)
    assert ids(ft("mainframe")) == [kept]
    for mode in ("fulltext", "hybrid"):
        assert gone not in ids(memories_search(query="mainframe decommissioned", namespace="global", collection=None, mode=mode, limit=50))


def test_expired_memory_never_appears(hash_embedder) -> None:
    remember("Bob prefers tabs over spaces in Python code")
    expired = remember("Temporary VPN password rotation window").id
    live = remember("The VPN window for maintenance is Sunday").id
    t0 = remember("VPN policy: always on", retention_tier="T0").id
    past = timezone.now() - timedelta(minutes=1)
    Memory.objects.filter(pk=expired).update(expires_at=past, decay_eligible=True)
    # a T0 memory is not decay-eligible: a stale expires_at does not hide it
    Memory.objects.filter(pk=t0).update(expires_at=past, decay_eligible=False)
    assert set(ids(ft("vpn window"))) == {live, t0}
    for mode in ("fulltext", "hybrid"):
        found = ids(memories_search(query="vpn window rotation", namespace="global", collection=None, mode=mode, limit=50))
        assert expired not in found
        assert live in found


def test_memory_expiring_in_the_future_still_appears(hash_embedder) -> None:
    soon = remember("Conference badge pickup desk").id
    Memory.objects.filter(pk=soon).update(expires_at=timezone.now() + timedelta(minutes=5))
    assert ids(ft("badge pickup")) == [soon]


# --------------------------------------------------------------------------- index kept in sync


def test_forget_removes_from_index(hash_embedder) -> None:
    add_fillers()
    gone = remember("The staging database password lives in the vault").id
    kept = remember("The staging cluster has three nodes").id
    memory_forget(memory_id=gone, namespace=None, actor="test")
    assert ids(ft("staging vault database")) == [kept]
    assert ft("vault") == []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT COUNT(*) FROM memories_fts WHERE memory_id = %s", [gone.replace("-", "")])
        else:
            cursor.execute("SELECT COUNT(*) FROM memory_search WHERE memory_id = %s", [gone])
        assert cursor.fetchone()[0] == 0


def test_new_memory_is_searchable_immediately(hash_embedder) -> None:
    assert ft("hovercraft") == []
    mid = remember("My hovercraft is full of eels").id
    assert ids(ft("hovercraft")) == [mid]


class AliasEmbedder(HashEmbedder):
    """HashEmbedder where chosen texts share a vector: forces a semantic dedup match."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def _vector(self, text: str):  # noqa: ANN202
        return super()._vector(self.aliases.get(text, text))


@pytest.fixture
def merge_embedder() -> AliasEmbedder:
    embedder = AliasEmbedder(
        {
            "Our authentication service uses JWT with a 1h expiry and rotating refresh tokens":
                "Our auth service uses JWT with a 1h expiry",
            "The billing service runs on Kubernetes in eu-west": "The billing service runs on Kubernetes",
        }
    )
    embeddings.set_embedder(embedder)
    embedded.reset_vector_index()
    return embedder


def test_update_merge_reindexes_new_content(merge_embedder) -> None:
    """A dedup UPDATE that elaborates keeps the old text as a superseded version (default
    ``deduplication.update_mode``): the new words match the new version, and words only in the old
    text no longer match anything current (the old version sits in the superseded partition)."""
    add_fillers()
    first = remember("Our auth service uses JWT with a 1h expiry")
    assert ids(ft("auth")) == [first.id]
    second = remember("Our authentication service uses JWT with a 1h expiry and rotating refresh tokens")
    assert (second.operation, second.merged_with_id, second.superseded) == ("UPDATE", first.id, (first.id,))
    assert ids(ft("refresh tokens")) == [second.id]
    assert ids(ft("rotating")) == [second.id]
    assert ft("auth") == []  # the old version's word is out of current search
    assert str(Memory.objects.get(pk=first.id).superseded_by) == second.id
    assert ids(ft("jwt expiry")) == [second.id]
    assert ids(fulltext_hits("auth", namespace="global", collection=None, limit=5, now=timezone.now(),
                             versions="superseded")) == [first.id]


def test_update_with_new_tags_reindexes_tags(merge_embedder) -> None:
    first = remember("The billing service runs on Kubernetes", tags=["billing"])
    assert ft("payments") == []
    second = remember("The billing service runs on Kubernetes in eu-west", tags=["payments"])
    assert (second.operation, second.merged_with_id) == ("UPDATE", first.id)
    assert ids(ft("payments")) == [second.id]
    assert ids(ft("billing")) == [second.id]  # the new version carries the union of the tags
    assert ids(ft("west")) == [second.id]


# --------------------------------------------------------------------------- both backends agree


@pytest.mark.parametrize(
    ("content", "query"),
    [
        ("Le café ferme le lundi", "cafe"),
        ("Le café ferme le lundi", "café"),
        ("The naïve approach failed", "naive"),
        ("The naive approach failed", "naïve"),
    ],
)
def test_accents_are_folded_on_every_backend(hash_embedder, content: str, query: str) -> None:
    """The SQLite index is created with remove_diacritics; PostgreSQL must answer the same."""
    mid = remember(content).id
    remember("Unrelated note about the parking garage")
    assert ids(ft(query)) == [mid]


# --------------------------------------------------------------------------- curation in the admin


def _change_form_data(admin_client, url: str) -> dict[str, object]:  # noqa: ANN001
    """The change form's current values, as the browser would post them back."""
    form = admin_client.get(url).context["adminform"].form
    data: dict[str, object] = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if hasattr(field.widget, "widgets"):  # split date/time
            parts = value if isinstance(value, list) else field.widget.decompress(value)
            for i, part in enumerate(parts):
                data[f"{name}_{i}"] = "" if part is None else part
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else value
    return data


def test_content_edited_in_the_admin_is_reindexed(hash_embedder, admin_client) -> None:
    """People curate memories in the Django admin: an edited content must be searchable as edited."""
    mid = remember("The billing service runs on Kubernetes").id
    url = f"/admin/memories/memory/{mid}/change/"
    data = _change_form_data(admin_client, url)
    data["content"] = "The payroll service runs on Nomad"
    response = admin_client.post(url, data)
    assert response.status_code == 302
    assert Memory.objects.get(pk=mid).content == "The payroll service runs on Nomad"
    assert ids(ft("nomad payroll")) == [mid]
    assert ft("kubernetes") == []


# --------------------------------------------------------------------------- scope words and deepening


def scope_token(kind: str, value: str) -> str:
    """The opaque scope words an earlier version indexed beside the text (and any look-alike)."""
    import hashlib

    return kind + hashlib.sha256(value.encode()).hexdigest()[:20]


def test_content_cannot_smuggle_a_memory_into_another_namespace_or_collection(hash_embedder) -> None:
    bob = remember("Bluebird roadmap for bob", namespace="bob", collection="home").id
    sneaky = remember(
        f"Bluebird roadmap {scope_token('ns', 'bob')} {scope_token('co', 'home')}",
        namespace="alice", collection="work", tags=[scope_token("ns", "bob")],
    ).id
    assert ids(ft("bluebird roadmap", namespace="bob")) == [bob]
    assert ids(ft("bluebird roadmap", namespace="bob", collection="home")) == [bob]
    assert ids(ft("bluebird roadmap", namespace="alice", collection="home")) == []
    assert ids(ft("bluebird roadmap", namespace="alice")) == [sneaky]


def test_query_equal_to_a_scope_word_matches_nothing(hash_embedder) -> None:
    """Namespaces are filtered outside the text: a query that spells a scope word matches no memory."""
    remember("The billing service runs on Kubernetes")
    remember("Lunch is served at noon")
    assert ft(scope_token("ns", "global")) == []
    assert ft(scope_token("co", "general")) == []


def test_live_match_found_below_many_expired_better_matches(hash_embedder, bhg_config) -> None:
    bhg_config.deduplication.enabled = False
    expired = [remember(f"Kubernetes kubernetes kubernetes note {i}").id for i in range(40)]
    live = remember("A long note that mentions kubernetes only once among many other words here").id
    Memory.objects.filter(pk__in=expired).update(expires_at=timezone.now() - timedelta(hours=1))
    assert ids(ft("kubernetes", limit=1)) == [live]
    assert ids(ft("kubernetes", limit=5)) == [live]
    found = memories_search(query="kubernetes", namespace="global", collection=None, mode="fulltext", limit=3)
    assert ids(found) == [live]


def test_scores_stay_normalised_when_archived_rows_share_the_terms(hash_embedder) -> None:
    """Archived memories are not live documents: they must not distort BM25 for the live ones."""
    archived = [remember(f"Kubernetes cluster upgrade log entry {i}").id for i in range(6)]
    short = remember("Kubernetes upgrade").id
    long = remember("Kubernetes is mentioned once in this much longer note about several unrelated topics").id
    Memory.objects.filter(pk__in=archived).update(archived=True)
    hits = ft("kubernetes upgrade")
    assert ids(hits) == [short, long]
    assert hits[0].fulltext == pytest.approx(1.0)
    assert all(0.0 < h.fulltext <= 1.0 for h in hits)
    assert all(h.score > 0 for h in hits)


def test_ranking_in_a_namespace_does_not_depend_on_other_namespaces(hash_embedder, bhg_config) -> None:
    """Term statistics are per namespace (as on PostgreSQL): another tenant's memories must not
    reorder, or reveal themselves through, this namespace's results."""
    bhg_config.deduplication.enabled = False
    add_fillers(namespace="bob")
    double = remember("alpha alpha note", namespace="bob").id
    single = remember("gamma note here", namespace="bob").id
    before = ft("alpha gamma", namespace="bob")
    assert ids(before) == [double, single]
    for i in range(50):
        remember(f"alpha entry {i} of the other tenant", namespace="alice")
    after = ft("alpha gamma", namespace="bob")
    assert ids(after) == [double, single]
    assert [h.fulltext for h in after] == pytest.approx([h.fulltext for h in before])


@pytest.mark.django_db(transaction=True)
def test_database_flush_also_clears_the_fulltext_index(hash_embedder) -> None:
    """`manage.py flush` (and every transactional test's teardown) must work with the index table."""
    from django.core.management import call_command

    remember("The billing service runs on Kubernetes")
    call_command("flush", interactive=False, verbosity=0)
    assert Memory.objects.count() == 0
    assert ft("kubernetes") == []
    table = "memories_fts" if connection.vendor == "sqlite" else "memory_search"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")  # noqa: S608 - constant table name
        assert cursor.fetchone()[0] == 0
