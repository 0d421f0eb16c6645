"""GET /documents/{entry_id} over a real KnowledgeStore core (in process) and the real route:
a validly signed link with a malformed tenant is refused 403 (never 5xx); a deleted entry and
one the link's groups may no longer open get one and the same 403 answer (docs/MCP.md); only a
store that cannot answer is a 503."""
from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.tools.documents import DocumentRoute
from shared.audit import AuditLog
from shared.auth.config import AuthConfig
from shared.errors import PermissionDenied, Unavailable
from shared.records import ArtifactMeta, DocumentIn
from shared.signing import LinkSigner
from tests.support.inprocess import InProcessKnowledge

BASE = "http://docs.test"


@pytest.fixture
async def served(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path / "store")
    await knowledge.store.ingest("acme", "", [
        DocumentIn(ArtifactMeta(artifact_id="open", title="Open", source_id="s"), "# Open\n\nThe heron memo."),
        DocumentIn(ArtifactMeta(artifact_id="hr", title="HR", source_id="s", visibility_groups=("hr",)),
                   "# HR\n\nThe kestrel memo."),
    ])
    signer = LinkSigner(b"k" * 32, BASE, 600)
    route = DocumentRoute(knowledge, AccessPolicy(knowledge, AuthConfig()), signer, AuditLog(tmp_path / "audit.log"))
    app = Starlette(routes=[Route("/documents/{entry_id:path}", route.open_document)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client, signer, knowledge
    await knowledge.close()


@pytest.mark.parametrize("tenant", ["../beta", "alpha/../beta", "", "a" * 65, "al pha"])
async def test_a_validly_signed_link_with_a_malformed_tenant_is_refused_not_a_server_error(served, tenant):
    client, signer, _ = served
    response = await client.get(signer.sign("open#0", tenant, "alice"))
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "link malformed"


async def test_a_deleted_entry_and_a_revoked_one_get_one_answer(served):
    client, signer, knowledge = served
    assert (await client.get(signer.sign("open#0", "acme", "alice"))).text.startswith("# Open")
    assert (await client.get(signer.sign("hr#0", "acme", "hank", ["hr"]))).status_code == 200
    revoked = await client.get(signer.sign("hr#0", "acme", "alice", []))          # not (or no longer) in hr
    await knowledge.store.delete("acme", ["open"])
    deleted = await client.get(signer.sign("open#0", "acme", "alice"))
    assert revoked.status_code == deleted.status_code == 403
    assert revoked.json() == deleted.json() and revoked.json()["error"] == "forbidden"


async def test_only_a_store_that_cannot_answer_is_a_503(served):
    client, signer, knowledge = served
    link = signer.sign("open#0", "acme", "alice")
    knowledge.fail("get_entries", PermissionDenied("the store refused this principal"))
    assert (await client.get(link)).status_code == 403
    knowledge.fail("get_entries", Unavailable("the store is down"))
    down = await client.get(link)
    assert down.status_code == 503 and down.json()["error"] == "backend_unavailable"
