"""The KnowledgeStore's caller policy as a fixed matrix: every call of the front (front.py
`CALLS`), for each kind of caller that must be held back, on each adapter (issue "one query
path"). Each cell is the outcome today's code gives, hard-coded in EXPECTED; the in-process
adapter and the gRPC adapter must both give it (the policy is applied once, in `StoreFront`), so
an adapter that skipped the policy would turn a refusal into an answer, or a filtered answer
into a full one, and fail its cells.

One KnowledgeStore, composed as its process composes it (`services.knowledge_store.main.compose`
with an identity directory: authentication on; embeddings from the suite's `HashEmbedder`),
serves every column:

    in-process  `InProcessKnowledgeStoreClient` as rag_pipeline (`nucleus up --mode single`)
    gRPC        the composed servicer behind its auth interceptor on 127.0.0.1:0, called by
                `KnowledgeStoreClient` signing as rag_pipeline (an on-behalf-of assertion of the
                user the work is for, else rag_pipeline's own service token)
    MCP         the service's /mcp app as served (`mcp_http_app`: its token verifier over the
                stack's trust bundle), over ASGI in this process, with the token the stack would
                carry for the row

Rows are the end user rag_pipeline works for (`shared.identity.acting_for`); both adapters derive
the verified caller from it as the product does (in process `InProcessCaller`; over gRPC the
signed token the interceptor verifies). rag_pipeline is the only service that may call the
KnowledgeStore besides the operator. No KnowledgeStore call streams its reply today (no front
method is an async generator, asserted below); the runner drains a streamed answer, so a call
that becomes streamed keeps its cells.

MCP. The KnowledgeStore's /mcp admits only the operator's token (`ServiceTokenVerifier`): every
row is refused there with HTTP 401 before any tool runs, whatever the front would answer. Tools
exist for five cells only (MCP_TOOLS); the other calls have no MCP tool, so no MCP cell. Behind
the door the tools call the front in the principal's tenant:
`test_behind_the_mcp_door_the_tools_give_the_fronts_answers` runs each tool with a tenant
user's principal (injected where the SDK's bearer middleware puts it, since the verifier lets
none through today) and checks it gets the front's cell. The row "another tenant's
user" has no MCP-tool cell: a tool takes no tenant, so that user cannot ask for another tenant.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from grpc import aio as grpc_aio
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError

from ranking.profile import RankingProfile
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.front import CALLS, StoreFront
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.knowledge_store.main import compose
from services.knowledge_store.personas import Persona
from shared.inprocess import InProcessCaller
from shared.auth.service_auth import ServiceAuth
from shared.auth.service_identity import ServiceSigner, ensure_identities
from shared.errors import NucleusError
from shared.identity import ADMIN, OPERATOR, Principal, acting_for
from shared.records import RetrievalRequest, SearchFilters, SearchLogRecord
from shared.service_runner import mcp_http_app
from shared.settings import KnowledgeStoreSettings
from tests.support.inprocess import InProcessLanguageModel
from tests.support.ranking_models import linear_model
from tests.support.raw_mcp import HEADERS, http_to, session
from tests.unit.knowledge_store.helpers import HashEmbedder, doc

pytestmark = pytest.mark.integration

TENANT, OTHER = "acme", "globex"
NOTE = "The battery controller resets when the status light blinks green"
PUBLIC_TEXT = f"{NOTE} in every building."
DOCS = {
    TENANT: [doc("public", PUBLIC_TEXT),
             doc("secret", f"{NOTE} in the incident room.", visibility_groups=("security",))],
    OTHER: [doc("globex-note", f"{NOTE} at Globex.")],
}
ENTRY_IDS = ["public#0", "secret#0"]
QUERY = "battery controller"
QUERY_VECTOR = HashEmbedder().vector(QUERY)

#: The rows: the end user rag_pipeline works for (None: rag_pipeline for no user). The artifact
#: "secret" is visible to the group "security" only, "public" to everyone of tenant acme.
ROWS: dict[str, Principal | None] = {
    # an admin of globex in the group "security": only the tenant differs from ada's
    "another tenant's user": Principal(OTHER, "gil", groups=("security",), roles=(ADMIN,), auth_method="api_key"),
    "a user outside the group": Principal(TENANT, "bob", groups=("sales",), auth_method="api_key"),
    # in the group (her reads are the in-group answer, the contrast to bob's), without the admin role
    "a non-admin user": Principal(TENANT, "ann", groups=("security",), auth_method="api_key"),
    # the tenant's admin: every tenant-wide write, but not the operator's backups and restores
    "a tenant admin, not operator": Principal(TENANT, "ada", groups=("security",), roles=(ADMIN,),
                                              auth_method="jwt"),
    "a service for no user": None,
}


# ---------------------------------------------------------------------------- the calls
def _ids(hits) -> list[str]:
    return sorted(h.artifact.artifact_id for h in hits)


def _calls(scratch: Path) -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]:
    """Each cell's call, the same on both clients: (client -> its answer, answer -> the part
    compared). Writes are idempotent (re-ingesting "public" as it is, deleting an id that does
    not exist, re-putting the seeded profiles and persona), so no cell depends on the ones before."""
    keyword = RetrievalRequest(TENANT, QUERY, 10, SearchFilters(), keyword=True, hits=True)
    dense = RetrievalRequest(TENANT, top_k=10, filters=SearchFilters(), vectors=np.asarray([QUERY_VECTOR]), hits=True)
    search = SearchLogRecord(TENANT, "matrix-search-0001", "someone-else", 1_700_000_000, "0" * 64, ())
    return {
        "ingest": (lambda c: c.ingest(TENANT, "", DOCS[TENANT][:1]),
                   lambda r: ([x.artifact_id for x in r.results], len(r.rejected))),
        "ingest_stream": (lambda c: c.ingest_stream(TENANT, "", DOCS[TENANT][:1]),
                          lambda r: (len(r) > 1 and all(type(x).__name__ == "IngestProgress" for x in r[:-1]),
                                     [x.artifact_id for x in r[-1].results], len(r[-1].rejected))),
        "delete": (lambda c: c.delete(TENANT, ["no-such-artifact"]), tuple),
        "retrieve": (lambda c: c.retrieve(keyword), lambda r: _ids(r.keyword_hits)),
        "retrieve (dense)": (lambda c: c.retrieve(dense), lambda r: _ids(r.dense_hits[0])),
        "get_entries": (lambda c: c.get_entries(TENANT, ENTRY_IDS), _ids),
        "get_entries_with_vectors": (lambda c: c.get_entries_with_vectors(TENANT, ENTRY_IDS),
                                     lambda r: (_ids(r[0]), [v is not None for v in r[1]])),
        "get_peer_entries": (lambda c: c.get_peer_entries(TENANT, ENTRY_IDS),
                             lambda r: (_ids(r.hits), [t is not None for t in r.terms])),
        "get_field_signals": (lambda c: c.get_field_signals(TENANT, ENTRY_IDS, QUERY, QUERY_VECTOR),
                              lambda r: r.found.tolist()),
        "score_keywords": (lambda c: c.score_keywords(TENANT, QUERY, [], [("Battery", f"{NOTE}.")]),
                           lambda r: len(r.bm25)),
        "topics": (lambda c: c.topics(TENANT, SearchFilters(), "topics"), lambda r: "answered"),
        "stats": (lambda c: c.stats(TENANT), lambda r: (r.tenant_id, r.artifacts)),
        "store_status": (lambda c: c.store_status(),
                         lambda r: ("whole" if r.data_dir else "one tenant's view", r.open_tenants)),
        "configure_index": (lambda c: c.configure_index(TENANT, "flat"), tuple),
        "check_tenant": (lambda c: c.check_tenant(TENANT, repair=False), lambda r: (r.tenant_id, r.entries)),
        "put_profile": (lambda c: c.put_profile(RankingProfile(TENANT, name="default", is_default=True)),
                        lambda r: (r.tenant_id, r.name)),
        "put_profile (named)": (lambda c: c.put_profile(RankingProfile(TENANT, name="mine")),
                                lambda r: (r.tenant_id, r.name)),
        "get_profile": (lambda c: c.get_profile(TENANT, "", "default"), lambda r: (r.tenant_id, r.name)),
        "list_profiles": (lambda c: c.list_profiles(TENANT), lambda r: sorted({p.name for p in r})),
        "put_ranking_model": (lambda c: c.put_ranking_model(TENANT, linear_model()), lambda r: len(r[0])),
        "get_ranking_model": (lambda c: c.get_ranking_model(TENANT, "0" * 64), len),
        "put_persona": (lambda c: c.put_persona(Persona(TENANT, "helpdesk", display_name="Help desk")),
                        lambda r: (r.tenant_id, r.persona_id)),
        "get_persona": (lambda c: c.get_persona(TENANT, "helpdesk"), lambda r: (r.tenant_id, r.persona_id)),
        "list_personas": (lambda c: c.list_personas(TENANT), lambda r: sorted(p.persona_id for p in r)),
        "record_feedback": (lambda c: c.record_feedback(TENANT, "entry", "secret#0", True, "someone-else"),
                            lambda r: r.artifact_id),
        "record_search": (lambda c: c.record_search(search), lambda r: r),
        "record_source_feedback": (lambda c: c.record_source_feedback(TENANT, "peer-docs", "peer-docs:remote-1",
                                                                      True, "someone-else"),
                                   lambda r: r.source_id),
        "source_votes": (lambda c: c.source_votes(TENANT), lambda r: sorted(v.source_id for v in r)),
        "backup_tenants": (lambda c: c.backup_tenants([TENANT], str(scratch / "backup")), len),
        "restore_tenant": (lambda c: c.restore_tenant(TENANT, str(scratch / "none.snapshot"), "0" * 64),
                           lambda r: r[0]),
        "export_tenant": (lambda c: c.export_tenant(TENANT, bytes(32)), len),
        "import_tenant": (lambda c: c.import_tenant(_chunks(b"not an archive"), bytes(32), as_tenant="copy"),
                          lambda r: r.tenant_id),
    }


async def _chunks(*parts: bytes):
    for part in parts:
        yield part


def ok(answer: Any) -> tuple[str, Any]:
    return ("ok", answer)


def denied(message: str) -> tuple[str, str]:
    return ("PermissionDenied", message)


def admin_only(what: str) -> tuple[str, str]:
    return denied(f"{what} needs the '{ADMIN}' role or an operator credential")


NOT_ITS_TENANT = denied(f"tenant_id '{TENANT}' is not the caller's tenant")
STATUS_REFUSED = denied("the store's status needs an operator credential, or the admin role of a tenant "
                        "(its own tenant's condition)")
NOT_FOR_A_USER_PROFILE = denied("service:rag_pipeline may write ranking profiles only on behalf of a user")
NOT_FOR_A_USER_FEEDBACK = denied("service:rag_pipeline may record feedback only on behalf of a user")
NO_MODEL = ("NotFound", f"no ranking model {'0' * 64} in tenant '{TENANT}'")
BOTH, PUBLIC_ONLY = ok(["public", "secret"]), ok(["public"])

#: Today's outcome of every cell, the same in process and over gRPC. Columns, in ROWS' order:
#:   other tenant | outside the group (bob) | non-admin in the group (ann) | tenant admin (ada) | service, no user
EXPECTED: dict[str, tuple[tuple[str, Any], ...]] = {
    "ingest": (NOT_ITS_TENANT, admin_only("ingest"), admin_only("ingest"), ok((["public"], 0)),
               admin_only("ingest")),
    "ingest_stream": (NOT_ITS_TENANT, admin_only("ingest"), admin_only("ingest"), ok((True, ["public"], 0)),
                      admin_only("ingest")),
    "delete": (NOT_ITS_TENANT, admin_only("delete"), admin_only("delete"), ok((0, 0)), admin_only("delete")),
    # reads: bob and the service see the public artifact only, ann and ada both
    "retrieve": (NOT_ITS_TENANT, PUBLIC_ONLY, BOTH, BOTH, PUBLIC_ONLY),
    "retrieve (dense)": (NOT_ITS_TENANT, PUBLIC_ONLY, BOTH, BOTH, PUBLIC_ONLY),
    "get_entries": (NOT_ITS_TENANT, PUBLIC_ONLY, BOTH, BOTH, PUBLIC_ONLY),
    "get_entries_with_vectors": (NOT_ITS_TENANT, ok((["public"], [True])), ok((["public", "secret"], [True, True])),
                                 ok((["public", "secret"], [True, True])), ok((["public"], [True]))),
    "get_peer_entries": (NOT_ITS_TENANT, ok((["public"], [True])), ok((["public", "secret"], [True, True])),
                         ok((["public", "secret"], [True, True])), ok((["public"], [True]))),
    "get_field_signals": (NOT_ITS_TENANT, ok([True, False]), ok([True, True]), ok([True, True]), ok([True, False])),
    "score_keywords": (NOT_ITS_TENANT, ok(1), ok(1), ok(1), ok(1)),
    "topics": (NOT_ITS_TENANT, ok("answered"), ok("answered"), ok("answered"), ok("answered")),
    "stats": (NOT_ITS_TENANT, ok((TENANT, 2)), ok((TENANT, 2)), ok((TENANT, 2)), ok((TENANT, 2))),
    # GetStoreStatus names no tenant: an admin (gil of globex as well) gets their own tenant's view
    "store_status": (ok(("one tenant's view", 1)), STATUS_REFUSED, STATUS_REFUSED, ok(("one tenant's view", 1)),
                     STATUS_REFUSED),
    "configure_index": (NOT_ITS_TENANT, admin_only("index settings"), admin_only("index settings"),
                        ok(("flat", 2)), admin_only("index settings")),
    "check_tenant": (NOT_ITS_TENANT, admin_only("a consistency check"), admin_only("a consistency check"),
                     ok((TENANT, 2)), admin_only("a consistency check")),
    "put_profile": (NOT_ITS_TENANT, admin_only("changing a default ranking profile"),
                    admin_only("changing a default ranking profile"), ok((TENANT, "default")),
                    admin_only("changing a default ranking profile")),
    "put_profile (named)": (NOT_ITS_TENANT, ok((TENANT, "mine")), ok((TENANT, "mine")), ok((TENANT, "mine")),
                            NOT_FOR_A_USER_PROFILE),
    "get_profile": (NOT_ITS_TENANT, ok((TENANT, "default")), ok((TENANT, "default")), ok((TENANT, "default")),
                    ok((TENANT, "default"))),
    "list_profiles": (NOT_ITS_TENANT, ok(["default", "mine"]), ok(["default", "mine"]), ok(["default", "mine"]),
                      ok(["default", "mine"])),
    "put_ranking_model": (NOT_ITS_TENANT, admin_only("storing a ranking model"),
                          admin_only("storing a ranking model"), ok(64), admin_only("storing a ranking model")),
    "get_ranking_model": (NOT_ITS_TENANT, NO_MODEL, NO_MODEL, NO_MODEL, NO_MODEL),
    "put_persona": (NOT_ITS_TENANT, admin_only("changing a persona"), admin_only("changing a persona"),
                    ok((TENANT, "helpdesk")), admin_only("changing a persona")),
    "get_persona": (NOT_ITS_TENANT, ok((TENANT, "helpdesk")), ok((TENANT, "helpdesk")), ok((TENANT, "helpdesk")),
                    ok((TENANT, "helpdesk"))),
    "list_personas": (NOT_ITS_TENANT, ok(["helpdesk"]), ok(["helpdesk"]), ok(["helpdesk"]), ok(["helpdesk"])),
    # bob's vote on the entry he cannot read is answered as on a missing one
    "record_feedback": (NOT_ITS_TENANT, ("NotFound", f"entry 'secret#0' not found in tenant '{TENANT}'"),
                        ok("secret"), ok("secret"), NOT_FOR_A_USER_FEEDBACK),
    "record_search": (NOT_ITS_TENANT, ok(None), ok(None), ok(None), ok(None)),
    "record_source_feedback": (NOT_ITS_TENANT, ok("peer-docs"), ok("peer-docs"), ok("peer-docs"),
                               NOT_FOR_A_USER_FEEDBACK),
    "source_votes": (NOT_ITS_TENANT, ok(["peer-docs"]), ok(["peer-docs"]), ok(["peer-docs"]), ok(["peer-docs"])),
    "backup_tenants": (denied("a backup needs an operator credential"),) * 5,
    "restore_tenant": (denied("a restore needs an operator credential"),) * 5,
    "export_tenant": (denied("a tenant export needs an operator credential"),) * 5,
    "import_tenant": (denied("a tenant import needs an operator credential"),) * 5,
}

#: The MCP tool of a cell's call (the KnowledgeStore's /mcp has these five; other calls: no tool).
MCP_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "ingest": ("ingest_documents", {"documents": [{"artifact_id": "public", "content": PUBLIC_TEXT}]}),
    "delete": ("delete_artifacts", {"artifact_ids": ["no-such-artifact"]}),
    "retrieve": ("search_by_keywords", {"keywords": QUERY, "top_k": 10}),
    "retrieve (dense)": ("search_by_vector", {"query_vector": QUERY_VECTOR.tolist(), "top_k": 10}),
    "stats": ("tenant_stats", {}),
}

#: The front's calls with a streamed reply (`_outcome` drains one: its progress, then its report).
STREAMED: tuple[str, ...] = ("ingest_stream", "export_tenant")


async def _outcome(make: Callable[[], Any], summarize: Callable[[Any], Any]) -> tuple[str, Any]:
    """A cell's outcome: ("ok", the compared part of the answer) or (error class, message)."""
    try:
        answer = make()
        if inspect.isawaitable(answer):
            answer = await answer
        else:                                   # a streamed call: its whole reply
            answer = [item async for item in answer]
        return ok(summarize(answer))
    except NucleusError as err:
        return (type(err).__name__, err.message)


# ---------------------------------------------------------------------------- the service
@pytest.fixture(scope="module")
async def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("caller-matrix")
    identity = ensure_identities(root / "identity")
    settings = KnowledgeStoreSettings(data_dir=root / "store", identity_dir=identity, grpc_port=0, mcp_port=0)
    spec, store = compose(settings, stdio=False, llm=InProcessLanguageModel())
    for tenant, documents in DOCS.items():
        await store.ingest(tenant, "", documents)
    await store.put_profile(RankingProfile(TENANT, name="default", is_default=True))
    await store.put_profile(RankingProfile(TENANT, name="mine"))
    await store.put_persona(Persona(TENANT, "helpdesk", display_name="Help desk"))
    await store.record_source_feedback(TENANT, "peer-docs", "peer-docs:remote-1", True, "seed-user")

    server = grpc_aio.server(interceptors=spec.grpc_interceptors)
    spec.add_servicers(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    rag = ServiceAuth.load("rag_pipeline", identity)
    remote = KnowledgeStoreClient(f"127.0.0.1:{port}", interceptors=rag.client_interceptors("knowledge_store"))
    local = InProcessKnowledgeStoreClient(store, InProcessCaller("rag_pipeline", "knowledge_store", True))
    yield SimpleNamespace(spec=spec, settings=settings, remote=remote, local=local, rag=rag,
                          operator=ServiceSigner.load(identity, OPERATOR),
                          verifier=ServiceAuth.load("knowledge_store", identity), calls=_calls(root))
    await remote.close()
    await server.stop(None)
    await spec.close()


def _token(service, row: str) -> str:
    """The bearer token rag_pipeline presents to the KnowledgeStore for the row's work."""
    return service.rag.signer.token("knowledge_store", ROWS[row])


# ---------------------------------------------------------------------------- the matrix
async def test_the_matrix_covers_every_call_and_every_mcp_tool(service):
    assert set(EXPECTED) == set(service.calls)
    assert {name.split(" (")[0] for name in EXPECTED} == set(CALLS), "a call of the front without its cells"
    assert all(len(cells) == len(ROWS) for cells in EXPECTED.values())
    assert tuple(n for n in CALLS if inspect.isasyncgenfunction(getattr(StoreFront, n))) == STREAMED
    tools = {t.name for t in await service.spec.mcp_server.list_tools()}
    assert tools == {tool for tool, _ in MCP_TOOLS.values()}, "an MCP tool without its cells"


@pytest.mark.parametrize("row", list(ROWS))
async def test_in_process_and_grpc_give_every_cell_todays_outcome(service, row):
    column = list(ROWS).index(row)
    wrong = []
    for call, (make, summarize) in service.calls.items():
        with acting_for(ROWS[row]):
            in_process = await _outcome(lambda: make(service.local), summarize)
            over_grpc = await _outcome(lambda: make(service.remote), summarize)
        expected = EXPECTED[call][column]
        if not in_process == over_grpc == expected:
            wrong.append(f"{call}: expected {expected}, in process {in_process}, over gRPC {over_grpc}")
    assert not wrong, f"{row}:\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize("row", list(ROWS))
async def test_mcp_refuses_every_row_before_any_tool(service, row):
    """The row's token (a verified on-behalf-of assertion, or rag_pipeline's own) on each tool:
    HTTP 401 from the bearer middleware, for the cells the front refuses and answers alike."""
    headers = {**HEADERS, "authorization": f"Bearer {_token(service, row)}"}
    async with http_to(mcp_http_app(service.spec, service.settings)) as http:
        for call, (tool, arguments) in MCP_TOOLS.items():
            response = await http.post("/mcp", headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
            assert (response.status_code, response.json().get("error")) == (401, "invalid_token"), (row, call)


async def test_mcp_answers_the_operator_naming_the_tenant(service):
    """The door's control: the same app and tool answer the operator's token for tenant acme."""
    token = service.operator.token("knowledge_store", tenant=TENANT)
    async with http_to(mcp_http_app(service.spec, service.settings)) as http:
        raw = await session(http, {"authorization": f"Bearer {token}"})
        answer = await raw.request("tools/call", {"name": "tenant_stats", "arguments": {}})
    assert answer["result"]["structuredContent"]["tenant_id"] == TENANT, answer


# ---------------------------------------------------------------------------- behind the MCP door
def _tool_answer(tool: str, content: dict) -> Any:
    if tool.startswith("search_"):
        return sorted(h["artifact_id"] for h in content["hits"])
    if tool == "ingest_documents":
        return [x["artifact_id"] for x in content["ingested"]], len(content["rejected"])
    if tool == "delete_artifacts":
        return content["artifacts_deleted"], content["entries_deleted"]
    return content["tenant_id"], content["artifacts"]


def _kinds() -> dict[str, str]:
    """Error kind ("permission_denied") -> class name, as MCP tool errors name them."""
    found, todo = {}, [NucleusError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.kind, cls.__name__)
        todo.extend(cls.__subclasses__())
    return found


async def _tool_outcome(service, row: str, tool: str, arguments: dict) -> tuple[str, Any]:
    """The tool run with the row's verified principal as the SDK's bearer middleware would hand
    it over (the AccessToken `ServiceTokenVerifier` makes, without its operator-only check)."""
    p = service.verifier.authenticate({"authorization": f"Bearer {_token(service, row)}"})
    access = AccessToken(token="matrix", client_id=p.key_id, scopes=[], expires_at=None, subject=p.user_id,
                         claims={"tenant": p.tenant_id, "user": p.user_id, "groups": list(p.groups),
                                 "roles": list(p.roles), "trusted_platform": False, "auth_method": p.auth_method,
                                 "key_id": p.key_id})
    reset = auth_context_var.set(AuthenticatedUser(access))
    try:
        result = await service.spec.mcp_server.call_tool(tool, arguments)
        return ok(_tool_answer(tool, result.structured_content))
    except ToolError as err:                     # "Error executing tool <name>: <kind>: <message>"
        kind, _, message = str(err).split(f"tool {tool}: ", 1)[-1].partition(": ")
        return (_kinds().get(kind, kind), message)
    finally:
        auth_context_var.reset(reset)


NO_TENANT_OR_USER = ("Unauthenticated", "the verified token carries no tenant or user")
#: What each tool does today with the row's principal. Columns: ROWS without "another tenant's
#: user" (a tool takes no tenant):  outside the group | non-admin | tenant admin | service, no user
EXPECTED_BEHIND_THE_DOOR: dict[str, tuple[tuple[str, Any], ...]] = {
    "ingest": (admin_only("ingest"), admin_only("ingest"), ok((["public"], 0)), NO_TENANT_OR_USER),
    "delete": (admin_only("delete"), admin_only("delete"), ok((0, 0)), NO_TENANT_OR_USER),
    "retrieve": (PUBLIC_ONLY, BOTH, BOTH, NO_TENANT_OR_USER),
    "retrieve (dense)": (PUBLIC_ONLY, BOTH, BOTH, NO_TENANT_OR_USER),
    "stats": (ok((TENANT, 2)),) * 3 + (NO_TENANT_OR_USER,),
}
#: The cells where a tool differs from the other adapters: the tools call the front too, but the
#: MCP identity serves no principal without a tenant and a user (a service acting for nobody).
TOOLS_DIFFER_FROM_THE_FRONT = {("a service for no user", call) for call in MCP_TOOLS}


async def test_behind_the_mcp_door_the_tools_give_the_fronts_answers(service):
    rows = [r for r in ROWS if r != "another tenant's user"]
    wrong, differ = [], set()
    for call, (tool, arguments) in MCP_TOOLS.items():
        for i, row in enumerate(rows):
            got = await _tool_outcome(service, row, tool, arguments)
            if got != EXPECTED_BEHIND_THE_DOOR[call][i]:
                wrong.append(f"{row} / {call}: expected {EXPECTED_BEHIND_THE_DOOR[call][i]}, got {got}")
            if got != EXPECTED[call][list(ROWS).index(row)]:
                differ.add((row, call))
    assert not wrong, "\n".join(wrong)
    assert differ == TOOLS_DIFFER_FROM_THE_FRONT
