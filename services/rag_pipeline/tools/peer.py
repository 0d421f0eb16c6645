"""This stack as a remote Nucleus: its model fingerprint, and its hits' vectors for a peer stack
(federation/peer_vectors.py has the protocol and the wire format).

    peer = PeerVectors(tools, LocalFingerprint(llm))
    register_fingerprint_tool(mcp, peer)                # nucleus_model_fingerprint
    return await peer.answer(ctx, raw_out)              # rag_get_raw_results, vectors in `_meta`

A `rag_get_raw_results` answer carries vectors only when all of these hold: the call asked for
them (`_meta` io.nucleus/vectors, with a fingerprint digest), the digest is this stack's own
now, and the caller is a verified peer stack (a peer key with a verified assertion, so the
caller is `<user>@<peer stack>`: shared/auth/principals.py). Only this stack's own hits get one
(a hit it federated from elsewhere does not), read from the KnowledgeStore as that caller
(GetEntries include_vectors and include_terms): the store checks tenant and groups again,
exactly as for the hits. With the vectors go each hit's analysed keyword terms and richness, so
the peer computes BM25 with its own statistics without analysing the texts.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from services.rag_pipeline.federation.peer_vectors import (
    FINGERPRINT_TOOL,
    VECTORS_META,
    LocalFingerprint,
    encode_entries,
    wanted,
)
from services.rag_pipeline.tools.schemas import RawOut
from shared.errors import NucleusError
from shared.mcp_annotations import READ
from shared.mcp_errors import guarded

log = logging.getLogger(__name__)


class PeerVectors:
    def __init__(self, tools: Any, fingerprint: LocalFingerprint) -> None:
        self._tools = tools               # RagTools: the caller's identity and the KnowledgeStore port
        self.fingerprint = fingerprint

    async def fingerprint_json(self, ctx: Context | None) -> dict[str, Any]:
        self._tools.principal(ctx)        # any verified caller (the transport has authenticated it)
        return (await self.fingerprint.get()).to_json()

    async def answer(self, ctx: Context | None, out: RawOut) -> RawOut | CallToolResult:
        """`out`, with its own hits' vectors in the result's `_meta` when the caller may have them."""
        digest = wanted(_request_meta(ctx))
        hits = [h for h in out.results.hits if h.provenance is None or h.provenance.source_type != "remote"]
        if not digest or not hits:
            return out
        try:
            who = self._tools.principal(ctx)
            if not who.extra.get("peer_stack"):
                return out                # vectors go to verified peer stacks only
            mine = await self.fingerprint.get()
            if digest != mine.digest:
                return out                # another model (or this one changed since the caller's probe)
            got = await self._tools.ks.get_peer_entries(who.tenant_id, [h.id for h in hits])
        except NucleusError as err:       # the answer stands without vectors: the peer re-scores
            log.info("vectors not sent with the answer: %s", err)
            return out
        payload = encode_entries(got, mine.digest, mine.dimension)
        if payload is None:
            return out
        structured = out.model_dump(mode="json", by_alias=True)
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(structured))],
                              structured_content=structured, _meta={VECTORS_META: payload})


def register_fingerprint_tool(mcp: MCPServer, peer: PeerVectors) -> None:
    @mcp.tool(annotations=READ, name=FINGERPRINT_TOOL, description=(
        "This stack's embedding model, identified by its own output: the unit vectors of a few fixed "
        "probe texts (float16, base64), their dimension and a digest. A federating Nucleus compares it "
        "with its own to use this stack's vectors without re-embedding."))
    async def nucleus_model_fingerprint(ctx: Context) -> dict[str, Any]:
        return await guarded(lambda: peer.fingerprint_json(ctx))


def _request_meta(ctx: Context | None) -> Any:
    try:
        return ctx.request_context.meta if ctx is not None else None
    except (ValueError, AttributeError):
        return None
