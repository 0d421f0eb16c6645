"""The auth config's source rules (a source only some groups may search) on the authenticated
stack: a rule hides its source from everyone else, and nothing else — not a source ingested after
the stack last listed the tenant's sources, not an artifact without a source id."""
from __future__ import annotations

from benchmarks.secure_stack import ingest_corpus
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.support.mcp_clients import http_client, structured

GROUP = "source-rules-test"
NEW_SOURCE = DocumentIn(artifact=ArtifactMeta(
    artifact_id="source-rules-okapi", title="Okapi narwhal memo", source_type="memo", source_id="memos-new",
    visibility_groups=(GROUP,)), content="# Okapi narwhal memo\n\nThe okapi narwhal memo, filed today.",
    content_type="text/markdown")
NO_SOURCE = DocumentIn(artifact=ArtifactMeta(artifact_id="source-rules-quokka", title="Quokka lantern note",
                                             visibility_groups=(GROUP,)),
                       content="The quokka lantern note has no source id.", content_type="text/plain")


async def _results(stack, headers: dict[str, str], query: str) -> list[dict]:
    async with http_client(stack.mcp_url, headers) as client:
        body = structured(await client.call_tool("search_and_rank", {"user_query_text": query,
                                                                     "top_k_final_rank": 10}))
    return [r["associated_artifact"] for r in body["results"]]


async def _search(stack, headers: dict[str, str], query: str) -> list[str]:
    return [a["artifact_id"] for a in await _results(stack, headers, query)]


async def test_a_rule_hides_only_its_own_source(secure_corpus):
    stack = secure_corpus
    viewer = {"Authorization": f"Bearer {stack.jwt(sub='rules-viewer', groups=[GROUP])}"}
    assert await _search(stack, viewer, "hotel expense limits")     # the stack has listed the tenant's sources
    await ingest_corpus(stack, {"acme": [NEW_SOURCE, NO_SOURCE]})
    try:
        assert "source-rules-okapi" in await _search(stack, viewer, "okapi narwhal memo")
        assert "source-rules-quokka" in await _search(stack, viewer, "quokka lantern note")
        query = "firmware rollout dock compatibility"
        engineering = await _results(stack, stack.headers("eng"), query)      # group engineering may search it
        assert any(a["source_id"] == "engineering-wiki" for a in engineering)
        others = await _results(stack, viewer, query)
        assert others and not [a for a in others if a["source_id"] == "engineering-wiki"]
    finally:
        client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                      interceptors=stack.operator("knowledge_store"))
        try:
            await client.delete("acme", [NEW_SOURCE.artifact.artifact_id, NO_SOURCE.artifact.artifact_id])
        finally:
            await client.close()
