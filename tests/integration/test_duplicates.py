"""Duplicate folding (services/rag_pipeline/merge.py) on the secure stack: one text stored under
three ids, one of them visible to `security-team` only. With folding asked for, a caller sees one
result listing the other copies it may see; without, each copy; a copy hidden from the caller never
represents the group, never suppresses a visible copy and is never named."""
from __future__ import annotations

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.support.mcp_clients import http_client, structured

pytestmark = pytest.mark.integration
TEXT = ("The zephyrine valve audit runs every spring: drain the manifold, log the gasket wear and "
        "sign the zephyrine checklist before the plant restarts.")
QUERY = "zephyrine valve audit checklist"
# Equal texts rank equal: the copy with the smallest artifact id represents its group (the tie-break),
# so the hidden one would represent it for a caller allowed to see it.
HIDDEN, PDF, HTML = "zephyrine-a-hidden", "zephyrine-b-pdf", "zephyrine-c-html"


def _doc(aid: str, text: str, groups: tuple[str, ...] = ()) -> DocumentIn:
    return DocumentIn(ArtifactMeta(artifact_id=aid, title="Zephyrine valve audit", source_id="hr-policies",
                                   source_type="policy", source_uri=f"https://intranet.acme.test/{aid}",
                                   file_name=f"{aid}.txt", visibility_groups=groups), text)


def _groups(body: dict) -> list[tuple[str, list[str]]]:
    return [(r["associated_artifact"]["artifact_id"], [d["artifact_id"] for d in r.get("duplicates", ())])
            for r in body["results"] if r["associated_artifact"]["artifact_id"].startswith("zephyrine")]


async def test_copies_fold_into_one_result_and_a_hidden_copy_is_never_shown_or_named(secure_corpus):
    ks = KnowledgeStoreClient(secure_corpus.addresses["knowledge_store"]["grpc"],
                              interceptors=secure_corpus.operator("knowledge_store"))
    search = {"user_query_text": QUERY, "top_k_final_rank": 5, "explain": False}
    try:
        await ks.ingest("acme", "", [_doc(HIDDEN, TEXT, ("security-team",)), _doc(PDF, TEXT),
                                     _doc(HTML, TEXT.replace(": ", ":  ").replace(" the", " The"))])
        async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as alice:
            off = structured(await alice.call_tool("search_and_rank", search))
            on = structured(await alice.call_tool("search_and_rank", {**search, "fold_duplicates": True}))
            segments = structured(await alice.call_tool("rag_search", {"search_phrases": [QUERY], "max_segments": 3,
                                                                       "fold_duplicates": True}))["segments"]
        async with http_client(secure_corpus.mcp_url, secure_corpus.headers("sec")) as sec:
            sec_on = structured(await sec.call_tool("search_and_rank", {**search, "fold_duplicates": True}))
    finally:
        await ks.delete("acme", [HIDDEN, PDF, HTML])
        await ks.close()
    assert sorted(a for a, _ in _groups(off)) == [PDF, HTML]              # off by default: both copies
    assert not any("duplicates" in r for r in off["results"])            # and the answer as before
    assert _groups(on) == [(PDF, [HTML])]                                 # one result, the hidden copy not named
    assert on["results"][0]["duplicates"][0] == {
        "artifact_id": HTML, "entry_id": f"{HTML}#0", "title": "Zephyrine valve audit", "source_id": "hr-policies",
        "source_uri": f"https://intranet.acme.test/{HTML}", "file_name": f"{HTML}.txt"}
    assert HIDDEN not in str(on) and HIDDEN not in str(segments)
    assert segments[0]["segment_uid"] == f"{PDF}#0" and [d["entry_id"] for d in segments[0]["duplicates"]] == [
        f"{HTML}#0"]
    assert set(segments[0]) <= {"segment_uid", "source_file_name", "source_file_type", "headline",
                                "segment_summary", "raw_text", "source_url", "highlights", "duplicates"}
    assert _groups(sec_on) == [(HIDDEN, [PDF, HTML])]                      # visible to sec: it folds and represents
