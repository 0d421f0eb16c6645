"""Cursors and held rankings of services/rag_pipeline/pages.py (the pages themselves run against
a real stack: tests/integration/test_pages.py)."""
from __future__ import annotations

import pytest

from services.rag_pipeline.models import SearchResponse
from services.rag_pipeline.pages import MAX_PER_CALLER, TTL_S, Page, Pages, _Held
from shared.errors import InvalidArgument
from shared.signing import LinkRejected, LinkSigner

ALICE = ("acme", "alice", "api_key")
SIGNER = LinkSigner(b"s" * 32, "https://rag.example", 600)


def _pages(now: float = 1_000_000.0) -> Pages:
    return Pages(None, SIGNER.derive_key("cursor"), clock=lambda: now)


def test_the_cursor_key_is_derived_and_is_not_the_link_secret():
    key = SIGNER.derive_key("cursor")
    assert len(key) == 32 and key != b"s" * 32 and key != SIGNER.derive_key("other")


def test_a_cursor_is_no_link_and_a_link_is_no_cursor():
    pages = _pages()
    cursor = pages._cursor(ALICE, "rid", "fp", 10, 1_000_600)
    assert pages._claims(cursor, ALICE, "fp") == ("rid", 10)
    with pytest.raises(LinkRejected):
        SIGNER.verify_link(cursor)
    with pytest.raises(LinkRejected):
        SIGNER.verify_link(f"https://rag.example/documents/{cursor}")
    link = SIGNER.sign("doc#0", "acme", "alice")
    for not_a_cursor in (link, link.rsplit("sig=", 1)[1], "x.y", "", "." * 2_000):
        with pytest.raises(InvalidArgument, match="cursor: is not a cursor this server issued; search again"):
            pages._claims(not_a_cursor, ALICE, "fp")


@pytest.mark.parametrize("who, fp, problem", [
    (("acme", "bob", "api_key"), "fp", "another caller"),
    (("acme", "alice", "jwt"), "fp", "another caller"),
    (("globex", "alice", "api_key"), "fp", "another caller"),
    (ALICE, "other", "another search request"),
])
def test_a_cursor_is_bound_to_its_caller_and_request(who, fp, problem):
    pages = _pages()
    with pytest.raises(InvalidArgument, match=f"cursor: .*{problem}.*search again"):
        pages._claims(pages._cursor(ALICE, "rid", "fp", 0, 1_000_600), who, fp)


def test_an_expired_or_tampered_cursor_is_refused():
    pages = _pages()
    with pytest.raises(InvalidArgument, match="cursor: has expired"):
        pages._claims(pages._cursor(ALICE, "rid", "fp", 0, 999_999), ALICE, "fp")
    head, _, sig = pages._cursor(ALICE, "rid", "fp", 0, 1_000_600).partition(".")
    other = _pages()._cursor(ALICE, "rid", "fp", 90, 1_000_600).partition(".")[0]
    with pytest.raises(InvalidArgument, match="not a cursor this server issued"):
        pages._claims(f"{other}.{sig}", ALICE, "fp")
    with pytest.raises(InvalidArgument, match="not a cursor this server issued"):
        Pages(None, SIGNER.derive_key("another stack"))._claims(f"{head}.{sig}", ALICE, "fp")


def test_held_rankings_are_bounded_per_caller_and_expire():
    pages = _pages()
    held = _Held("fp", "q", (), 1_000_000 + TTL_S, SearchResponse(results=()))
    for i in range(MAX_PER_CALLER + 2):
        pages._put(ALICE, f"r{i}", held)
    pages._put(("acme", "bob", "api_key"), "b", held)
    with pytest.raises(InvalidArgument, match="cursor: names a ranking this server does not hold"):
        pages._get(ALICE, "r0")
    assert pages._get(ALICE, f"r{MAX_PER_CALLER + 1}") is held and pages._get(("acme", "bob", "api_key"), "b")
    with pytest.raises(InvalidArgument, match="search again"):
        pages._get(("acme", "bob", "api_key"), "r1")          # another caller's request id
    now = [1_000_000.0]
    later = Pages(None, clock=lambda: now[0])
    later._put(ALICE, "r", held)
    assert later._get(ALICE, "r") is held
    now[0] += TTL_S + 1
    with pytest.raises(InvalidArgument, match="does not hold"):
        later._get(ALICE, "r")


def test_the_next_cursor_starts_at_the_first_result_not_shown():
    offsets: list[int] = []
    page = Page(SearchResponse(results=()), positions=(4, 6, 7), end=9,
                cursor_at=lambda at: offsets.append(at) or str(at))
    assert [page.cursor_after(n) for n in (3, 2, 0)] == ["9", "7", "4"]


class _Model:
    """The language model's embedding port over the store's hashing embedder (no model needed here)."""

    def __init__(self, embedder) -> None:
        self._embedder = embedder

    async def embed(self, texts, *, purpose: str = "query", timeout_s: float | None = None):
        return await self._embedder.embed(list(texts))

    async def close(self) -> None:
        pass


async def _acme(tmp_path):
    """An in-process store (hashing embedder) holding tenant "acme"'s 8 pump notes, its pipeline and pages."""
    from services.knowledge_store.embedded.core import KnowledgeStore
    from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
    from services.rag_pipeline.core import RagPipeline
    from shared.inprocess import InProcessCaller
    from shared.settings import RagPipelineSettings
    from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

    embedder = HashEmbedder()
    store = KnowledgeStore(settings_for(tmp_path / "s"), embedder)
    knowledge = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    pipeline = RagPipeline(RagPipelineSettings(), knowledge, _Model(embedder))
    await store.ingest("acme", "", [doc(f"d{i}", f"pump valve seal, part {i}. " + "pump " * i) for i in range(8)])
    return store, pipeline, Pages(pipeline, SIGNER.derive_key("cursor"))


async def test_an_import_that_replaces_the_tenant_drops_its_held_rankings_and_a_write_does_not(tmp_path):
    from services.knowledge_store.archive import export_records, import_archive
    from services.knowledge_store.archive_file import open_archive, write_archive
    from services.rag_pipeline.models import SearchRequest
    from tests.unit.knowledge_store.helpers import doc

    key, model = bytes(range(32)), {"name": "hash-test", "dimension": 384}
    store, pipeline, pages = await _acme(tmp_path)
    try:
        paged, named = (SearchRequest(tenant_id="acme", query=q, top_k_final=2) for q in ("pump valve", "seal"))
        first = await pages.search(paged, None)
        second = await pages.search(paged, None, cursor=first.cursor_after(2))
        search_id = (await pages.search(named, None)).response.search_id
        await store.ingest("acme", "", [doc("d9", "a new pump valve memo")])      # a write keeps them
        assert pages.held_request(None, "acme", search_id) == named
        path = tmp_path / "acme.archive"
        await write_archive(path, key, "acme", model, export_records(store, "acme"))
        await import_archive(store, open_archive(path, key), "acme", model, replace_tenant=True)
        with pytest.raises(InvalidArgument, match="cursor: names a search of data replaced since"):
            await pages.search(paged, None, cursor=second.cursor_after(2))
        with pytest.raises(InvalidArgument, match="search_id: names a search of data replaced since"):
            pages.held_request(None, "acme", search_id)
        assert not pages._held, "both held rankings forgotten"
    finally:
        await pipeline.close()
        store.close()


async def test_every_logged_search_id_names_its_request_for_its_caller_only_and_bounded(tmp_path):
    """A search whose first page was not full, and one not paged at all, are named by their search
    ids too (their requests held alone); a later page's id names its request; the requests held
    alone are bounded per caller apart from the held rankings, which they never evict."""
    from services.rag_pipeline.models import SearchRequest
    from shared.identity import Principal

    store, pipeline, pages = await _acme(tmp_path)
    try:
        partial, plain, paged = (SearchRequest(tenant_id="acme", query=q, top_k_final=k)
                                 for q, k in (("seal", 20), ("valve", 3), ("pump valve", 2)))
        first_partial = await pages.search(partial, None)
        assert first_partial.cursor_after(8) is None and first_partial.response.search_id
        plain_id = (await pipeline.search(plain, None)).search_id
        first = await pages.search(paged, None)
        second = await pages.search(paged, None, cursor=first.cursor_after(2))
        assert pages.held_request(None, "acme", first_partial.response.search_id) == partial
        assert pages.held_request(None, "acme", plain_id) == plain
        assert pages.held_request(None, "acme", first.response.search_id) == paged
        assert pages.held_request(None, "acme", second.response.search_id) == paged    # a later page's id
        assert len(pages._held) == 3                    # the full page: held once, with its ranking
        bob = Principal(tenant_id="acme", user_id="bob", auth_method="api_key")
        with pytest.raises(InvalidArgument, match="search_id: names no search of yours"):
            pages.held_request(bob, "acme", plain_id)   # another caller's id: refused as an unknown one
        for i in range(MAX_PER_CALLER):                 # newer searches evict the oldest request held alone
            await pipeline.search(SearchRequest(tenant_id="acme", query=f"part {i}", top_k_final=3), None)
        for old in (first_partial.response.search_id, plain_id):
            with pytest.raises(InvalidArgument, match="search_id: names no search of yours"):
                pages.held_request(None, "acme", old)
        third = await pages.search(paged, None, cursor=second.cursor_after(2))      # the ranking is still held
        assert third.response.results and pages.held_request(None, "acme", first.response.search_id) == paged
        assert len(pages._held) == MAX_PER_CALLER + 1
    finally:
        await pipeline.close()
        store.close()
