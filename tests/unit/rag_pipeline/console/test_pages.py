"""The Traces and Tenant pages over the console's routes (Starlette's test client, a stub core):
roles (403 for a user), the trace id checked, waterfall bars as SVG attributes, the attribute
allow-list, the store's condition shown only when the store gives it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from services.rag_pipeline.console.app import Console, console_routes
from services.rag_pipeline.console.security import CSP
from services.rag_pipeline.console.traces import one_trace, search_traces
from services.rag_pipeline.core import RagPipeline
from shared.errors import InvalidArgument, NotFound, PermissionDenied
from shared.identity import ADMIN, OPERATOR, Principal
from shared.records import SourceStats, TenantStats

MS = 1_000_000
BASE = 1_800_000_000 * 1_000_000_000
SLOW, FAST, OTHER = "a" * 32, "b" * 32, "c" * 32
USER = Principal("acme", "alice", auth_method="api_key")
ADMIN_P = Principal("acme", "carol", roles=(ADMIN,), auth_method="jwt")
OPERATOR_P = Principal("", OPERATOR, roles=(ADMIN, OPERATOR), auth_method=OPERATOR)


def _span(trace, sid, parent, name, service, start, end, **attributes):
    return {"trace_id": trace, "span_id": sid, "parent_span_id": parent, "name": name, "kind": "INTERNAL",
            "service": service, "start_unix_nano": BASE + start * MS, "end_unix_nano": BASE + end * MS,
            "status": "UNSET", "attributes": attributes}


@pytest.fixture
def trace_dir(tmp_path) -> Path:
    rag = [_span(SLOW, "1" * 16, None, "rag.search_and_rank", "nucleus-rag-pipeline", 0, 100, **{
               "nucleus.results": 5, "nucleus.tenant_id": "acme", "nucleus.query": "secret question"}),
           _span(SLOW, "2" * 16, "1" * 16, "nucleus.v1.KnowledgeStore/SearchByVector", "nucleus-rag-pipeline", 50, 100,
                 **{"rpc.method": "SearchByVector", "db.statement": "SELECT secret"}),
           _span(FAST, "4" * 16, None, "rag.search_and_rank", "nucleus-rag-pipeline", 200, 210),
           _span(OTHER, "5" * 16, None, "tools/list", "nucleus-rag-pipeline", 300, 900)]
    ks = [_span(SLOW, "3" * 16, "2" * 16, "ks.search", "nucleus-knowledge-store", 55, 95, **{"nucleus.candidates": 40})]
    for name, spans in (("nucleus-rag-pipeline.jsonl", rag), ("nucleus-knowledge-store.jsonl", ks)):
        (tmp_path / name).write_text("".join(json.dumps(s) + "\n" for s in spans))
    return tmp_path


async def test_search_traces_are_listed_slowest_first_and_others_left_out(trace_dir):
    listed = await search_traces(trace_dir)
    assert [t["trace_id"] for t in listed["traces"]] == [SLOW, FAST]
    assert listed["traces"][0]["services"] == ["knowledge-store", "rag-pipeline"]
    assert (await search_traces(None))["traces"] == []


async def test_a_waterfall_places_bars_by_start_and_duration_and_shows_allowed_attributes_only(trace_dir):
    shown = await one_trace(trace_dir, SLOW)
    rows = {r["name"]: r for r in shown["rows"]}
    assert [r["name"] for r in shown["rows"]] == ["rag.search_and_rank", "nucleus.v1.KnowledgeStore/SearchByVector",
                                                   "ks.search"]
    assert (rows["rag.search_and_rank"]["x"], rows["rag.search_and_rank"]["w"]) == (0, 1000)
    assert (rows["ks.search"]["x"], rows["ks.search"]["w"]) == (550, 400)
    assert rows["ks.search"]["service"] == "knowledge-store" and rows["ks.search"]["attrs"] == [("candidates", "40")]
    text = json.dumps(shown)
    assert "secret" not in text and "tenant_id" not in text


async def test_a_bad_or_unknown_trace_id_is_refused(trace_dir):
    for bad in ("../etc", "A" * 32, "a" * 31, "0" * 32):
        with pytest.raises(InvalidArgument):
            await one_trace(trace_dir, bad)
    with pytest.raises(NotFound):
        await one_trace(trace_dir, "d" * 32)


class StubPipeline:
    tenant_for = staticmethod(RagPipeline.tenant_for)               # the core's own tenant rule

    def __init__(self, *, status_refused: bool) -> None:
        self.refused = status_refused
        self.asked: list[tuple[str, Principal]] = []

    async def tenant_stats(self, tenant_id: str, principal: Principal) -> TenantStats:
        tenant = tenant_id or principal.tenant_id
        self.asked.append((tenant, principal))
        return TenantStats(tenant_id=tenant, artifacts=3, entries=42, vectors=42, keyword_docs=42,
                           sources=(SourceStats("wiki", "policy", 3, 42, 0, ("eng",), ()),), last_indexed_unix=0,
                           index_kind="flat", dimension=384)

    async def store_status(self, principal: Principal):
        if self.refused:
            raise PermissionDenied("the store's status needs an operator credential")
        from services.knowledge_store.models import Problem, StoreStatus

        return StoreStatus(state="degraded", data_dir="/srv/data", read_only=False, free_bytes=2 << 30,
                           total_bytes=8 << 30, problems=(Problem("acme", "full", "acme is full", 0),
                                                          Problem("globex", "corrupt", "globex broke", 0)),
                           repaired_rows=0, open_tenants=2)


def _client(trace_dir: Path | None, pipeline: StubPipeline, principal: Principal, *, auth_on: bool = True):
    console = Console(pipeline, object() if auth_on else None, trace_dir=trace_dir)   # type: ignore[arg-type]
    session = console.sessions.create(principal)
    client = TestClient(Starlette(routes=console_routes(console)), base_url="http://127.0.0.1")
    client.cookies.set("nucleus_console", session.session_id, path="/console")
    return client


def test_traces_are_for_operators_only_and_draw_svg_bars(trace_dir):
    for who in (USER, ADMIN_P):
        client = _client(trace_dir, StubPipeline(status_refused=True), who)
        assert client.get("/console/traces").status_code == 403
        assert client.get(f"/console/traces/{SLOW}").status_code == 403
        assert 'href="/console/traces"' not in client.get("/console/search").text
    op = _client(trace_dir, StubPipeline(status_refused=True), OPERATOR_P)
    listing = op.get("/console/traces")
    assert listing.status_code == 200 and listing.headers["content-security-policy"] == CSP
    assert f'href="/console/traces/{SLOW}"' in listing.text and OTHER not in listing.text
    page = op.get(f"/console/traces/{SLOW}")
    assert page.status_code == 200 and '<rect class="span-bar" x="550.0" y="1" width="400.0"' in page.text
    assert "style=" not in page.text and "secret" not in page.text
    assert op.get("/console/traces/not-a-trace-id").status_code == 400
    assert op.get(f"/console/traces/{'d' * 32}").status_code == 404


def test_the_tenant_page_is_for_admins_of_their_tenant_and_operators(trace_dir):
    assert _client(trace_dir, StubPipeline(status_refused=True), USER).get("/console/admin/tenant").status_code == 403
    pipeline = StubPipeline(status_refused=True)
    page = _client(trace_dir, pipeline, ADMIN_P).get("/console/admin/tenant?tenant=globex")
    assert page.status_code == 200 and '<td class="num" id="stat-entries">42</td>' in page.text
    assert pipeline.asked == [("acme", ADMIN_P)]                 # the admin's own tenant, whatever the URL says
    assert "the operator and tenant admins only" in page.text and 'href="/console/traces"' not in page.text
    op_pipeline = StubPipeline(status_refused=False)
    op = _client(trace_dir, op_pipeline, OPERATOR_P)
    assert 'id="tenant"' in op.get("/console/admin/tenant").text and op_pipeline.asked == []   # types the tenant
    page = op.get("/console/admin/tenant?tenant=acme")
    assert "storage degraded" in page.text and "globex broke" in page.text and op_pipeline.asked[0][0] == "acme"
    assert '<code id="data-dir">/srv/data</code>' in page.text                  # the whole condition


def test_with_authentication_off_the_local_admin_sees_only_its_tenants_problems(trace_dir):
    local = Principal("acme", "me", roles=(ADMIN,), auth_method="local")
    client = _client(trace_dir, StubPipeline(status_refused=False), local, auth_on=False)
    page = client.get("/console/admin/tenant")
    assert "acme is full" in page.text and "globex" not in page.text
    assert client.get("/console/traces").status_code == 200          # the owner of a local stack


async def test_a_run_interrupted_by_a_restart_shows_as_interrupted_to_its_caller_only(tmp_path):
    from services.rag_pipeline.console.query_sets import EvalRun, EvalRuns

    before = EvalRuns(tmp_path)
    cut = EvalRun("r" * 22, (ADMIN_P.tenant_id, ADMIN_P.user_id), 30, {"a": "x", "b": "y", "tenant": ""}, done=12)
    before._save(cut)                                          # as written mid-run, then the process died
    console = Console(StubPipeline(status_refused=True), object(), runs=EvalRuns(tmp_path))  # type: ignore[arg-type]
    client = TestClient(Starlette(routes=console_routes(console)), base_url="http://127.0.0.1")
    for who, status in ((ADMIN_P, 200), (USER, 404)):
        client.cookies.set("nucleus_console", console.sessions.create(who).session_id, path="/console")
        page = client.get(f"/console/compare/runs/{cut.run_id}")
        assert page.status_code == status
    client.cookies.set("nucleus_console", console.sessions.create(ADMIN_P).session_id, path="/console")
    page = client.get(f"/console/compare/runs/{cut.run_id}")
    assert 'id="set-interrupted"' in page.text and "after 12 of" in page.text and 'id="set-summary"' not in page.text
    assert 'http-equiv="refresh"' not in page.text


def test_deleting_a_stored_set_needs_csrf_and_its_uploader_or_an_admin_and_datasets_are_names_only(tmp_path):
    from services.rag_pipeline.console.datasets import ConsoleDatasets
    from services.rag_pipeline.console.query_sets import QuerySets

    raw = json.dumps({"query": "q", "relevant": ["d"]}).encode()
    set_id = QuerySets(tmp_path).save("acme", "carol's", raw, "carol")["id"]
    (tmp_path / "datasets.json").write_text(json.dumps({"datasets": [{"name": "tiny", "folder": "x",
                                                                       "tenants": ["acme"]}]}))
    console = Console(StubPipeline(status_refused=True), object(), data_dir=tmp_path,   # type: ignore[arg-type]
                      datasets=ConsoleDatasets.load(tmp_path / "datasets.json"))
    client = TestClient(Starlette(routes=console_routes(console)), base_url="http://127.0.0.1")

    def as_(who: Principal) -> str:
        session = console.sessions.create(who)
        client.cookies.set("nucleus_console", session.session_id, path="/console")
        return session.csrf

    csrf = as_(USER)                                                   # alice, a user who did not store it
    page = client.get("/console/compare")
    assert 'id="delete-form"' not in page.text and '<option value="tiny">tiny</option>' in page.text
    assert client.post("/console/compare/stored/delete", data={"set": set_id}).status_code == 403      # no CSRF
    assert client.post("/console/compare/stored/delete", data={"set": set_id, "csrf": csrf}).status_code == 403
    for typed in ("/etc/passwd", "../x", "other"):
        answer = client.post("/console/compare/dataset", data={"dataset": typed, "csrf": csrf})
        assert answer.status_code == 400 and "dataset: " in answer.text and "tiny" in answer.text    # what is accepted
    csrf = as_(Principal("globex", "gil", roles=(ADMIN,), auth_method="jwt"))          # another tenant's admin
    assert client.post("/console/compare/stored/delete", data={"set": set_id, "csrf": csrf}).status_code == 404
    assert '<option value="tiny">' not in client.get("/console/compare").text
    csrf = as_(ADMIN_P)                                                # the tenant's admin
    assert f'<option value="{set_id}">' in client.get("/console/compare").text
    done = client.post("/console/compare/stored/delete", data={"set": set_id, "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and QuerySets(tmp_path).listed("acme") == []


def test_every_form_post_larger_than_the_limit_is_refused_with_413_before_its_handler_runs(trace_dir):
    pipeline = StubPipeline(status_refused=True)
    client = _client(trace_dir, pipeline, ADMIN_P)
    huge = {"name": "x" * (65 * 1024)}
    for path in ("/console/admin/profile", "/console/admin/profiles", "/console/admin/sources/reload",
                 "/console/admin/registries/import", "/console/compare/dataset", "/console/compare/stored/delete",
                 "/console/compare/stored"):
        answer = client.post(path, data=huge)
        assert answer.status_code == 413 and "the form is too large" in answer.text, path
    assert client.post("/console/compare/dataset", data={"dataset": "x"}).status_code == 403   # small: CSRF next
    assert pipeline.asked == []


def test_a_result_page_shows_a_learned_model_s_feature_contributions():
    from services.rag_pipeline.console.app import _env
    from services.rag_pipeline.console.views import _result_view
    from services.rag_pipeline.models import Explanation, FeatureContribution, RankedResult
    from shared.records import ArtifactSummary, Entry

    listed = (FeatureContribution("fused", 0.75, -2.5), FeatureContribution("other features", None, 0.25))
    e = Explanation(weights=(1.0, 0.0, 0.0, 0.0), contributions=(0.5, 0.0, 0.0, 0.0), dense_cosine=0.1, bm25=1.0,
                    dense_rank=1, bm25_rank=1, dense_norm=1.0, bm25_norm=1.0, rerank_score=0.5, fusion_method="convex",
                    recency_applied=False, age_days=-1.0, feature_contributions=listed, learned_base=7.5)
    r = RankedResult(entry=Entry("e", "t", "", "a", 0, "text", "h", "s", 0, 0.5), artifact=ArtifactSummary("a"),
                     snippet="s", overall=0.5, scores=(0.5, 0.5, 0.5, 0.5), explanation=e)
    html = " ".join(_env().get_template("_result.html").render(row=_result_view(1, r), full=True).split())
    assert "learned model</dt><dd>base 7.500; fused 0.750 (-2.500), other features – (+0.250)" in html


def test_a_result_snippet_marks_its_highlights_and_escapes_every_part():
    from services.rag_pipeline.console.app import _env
    from services.rag_pipeline.console.views import _result_view
    from services.rag_pipeline.models import RankedResult
    from services.rag_pipeline.results import highlights
    from shared.records import ArtifactSummary, Entry

    snippet = "<b>Batteries</b> & the <script>x()</script> battery's reset"
    r = RankedResult(entry=Entry("e", "t", "", "a", 0, snippet, "h", "s", 0, 0.5), artifact=ArtifactSummary("a"),
                     snippet=snippet, overall=0.5, scores=(0.5, 0.5, 0.5, 0.5), explanation=None,
                     highlights=highlights(snippet, "battery script"))
    html = _env().get_template("_result.html").render(row=_result_view(1, r), full=True)
    assert ('<p class="snippet">&lt;b&gt;<mark>Batteries</mark>&lt;/b&gt; &amp; the &lt;<mark>script</mark>&gt;x()'
            '&lt;/<mark>script</mark>&gt; <mark>battery</mark>&#39;s reset</p>') in html


def test_a_result_names_the_copies_folded_into_it_escaped():
    from dataclasses import replace

    from services.rag_pipeline.console.app import _env
    from services.rag_pipeline.console.views import _result_view
    from services.rag_pipeline.models import RankedResult
    from shared.records import ArtifactSummary, Entry

    r = RankedResult(entry=Entry("e", "t", "", "a", 0, "text", "h", "s", 0, 0.5), artifact=ArtifactSummary("a"),
                     snippet="text", overall=0.5, scores=(0.5, 0.5, 0.5, 0.5), explanation=None)
    copy = replace(r, artifact=ArtifactSummary("<i>b</i>", source_id="wiki"))
    html = " ".join(_env().get_template("_result.html").render(row=_result_view(1, replace(r, duplicates=(copy,))),
                                                                full=True).split())
    assert 'copies folded into it: <code>&lt;i&gt;b&lt;/i&gt;</code> (wiki)</p>' in html
    assert "copies folded" not in _env().get_template("_result.html").render(row=_result_view(1, r), full=True)
