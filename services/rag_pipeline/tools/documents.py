"""GET /documents/{entry_id}: the target of every signed link the RAG tools hand out
(`source_url`, `uri`, `refreshed_url`).

The link's signature names the tenant, user and groups it was issued to; the entry is re-read
from the knowledge source and its access re-checked at every open (ignoring session tags,
which a browser opening the link does not carry). Every open is audited.

Answers (docs/MCP.md, "Signed links"): 200 with the entry's text; 403 `link <reason>` for a
tampered, malformed (a tenant that is not a tenant id included, however validly signed) or
expired link; 403 `forbidden` — one answer, so a link does not tell which — for an entry that
was deleted or that the link's user may no longer open; 503 `backend_unavailable` only when the
knowledge source cannot answer. A federated result's link (`<source>:<id>`, with a signed `to=`)
answers 302 to the remote's own URL while the link's user may still use that source (tenant
and groups, the sources file as it is now), else the same 403 `forbidden`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.ports import KnowledgeSource
from services.rag_pipeline.tools.calls import Call, audit_call
from shared.audit import AuditEvent, AuditLog
from shared.errors import InvalidArgument, NotFound, NucleusError
from shared.identity import TENANT_ID, Principal, act_for
from shared.signing import DOCUMENT_PREFIX, LinkRejected, LinkSigner

RESPONSE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                    "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'"}
GONE = {"error": "forbidden", "message": "this link can no longer be opened: the entry was deleted or your access "
                                         "to it was revoked (verify_document_access gives a fresh link if allowed)"}
REFUSED_KINDS = ("invalid_argument", "not_found", "permission_denied", "unauthenticated")


class DocumentRoute:
    """The signed-link document route; `open_document` is its Starlette endpoint."""

    def __init__(self, knowledge: KnowledgeSource, access: AccessPolicy, signer: LinkSigner, audit: AuditLog,
                 federation: Any = None) -> None:
        self.ks = knowledge
        self.access = access
        self.signer = signer
        self.audit = audit
        self.federation = federation        # who may still use a federated result's source

    async def open_document(self, request: Request) -> Response:
        entry_id = request.path_params.get("entry_id", "")
        call = Call("GET /documents")
        headers = dict(RESPONSE_HEADERS)
        try:
            claims = self.signer.verify_link(f"{DOCUMENT_PREFIX}{quote(entry_id, safe='')}?{request.url.query}")
            if not TENANT_ID.match(claims.tenant_id) or not claims.user_id:     # signed, yet not a principal
                raise LinkRejected("malformed", "link tenant or user is malformed")
        except LinkRejected as err:
            self.audit.record(AuditEvent(event="document", decision="deny", tool=call.tool, reason=f"link {err.reason}",
                                         entries=(entry_id[:256],)))
            return JSONResponse({"error": f"link {err.reason}", "message": err.message}, status_code=403,
                                headers=headers)
        who = Principal(tenant_id=claims.tenant_id, user_id=claims.user_id, groups=claims.groups,
                        auth_method="signed_link")
        call.principal = who
        if claims.target:
            return self._redirect(who, claims.entry_id, claims.target, headers)
        act_for(who)            # the store re-checks tenant and groups for this user too
        try:
            hits = await self.ks.get_entries(who.tenant_id, [claims.entry_id])
        except (NotFound, InvalidArgument):
            hits = []
        except NucleusError as err:
            audit_call(self.audit, call, "deny", f"{err.kind}: {err.message}", entries=[claims.entry_id])
            if err.kind in REFUSED_KINDS:          # the store refused this principal: not an outage
                return JSONResponse(GONE, status_code=403, headers=headers)
            return JSONResponse({"error": "backend_unavailable"}, status_code=503, headers=headers)
        if not hits:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason="entry not found", entries=[claims.entry_id]))
            return JSONResponse(GONE, status_code=403, headers=headers)
        reason = self.access.entry_denial(replace(who, session_tags=()), hits[0])
        if reason:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason=reason, resources=[hits[0].artifact.source_id],
                                                       entries=[claims.entry_id]))
            return JSONResponse(GONE, status_code=403, headers=headers)
        self.audit.record(AuditEvent.for_principal(who, event="document", decision="allow", tool=call.tool,
                                                   resources=[hits[0].artifact.source_id], entries=[claims.entry_id]))
        return PlainTextResponse(hits[0].entry.text, headers=headers)

    def _redirect(self, who: Principal, entry_id: str, target: str, headers: dict[str, str]) -> Response:
        sid = entry_id.split(":", 1)[0] if ":" in entry_id else ""
        source = self.federation.source_for(who, sid) if self.federation is not None and sid else None
        if source is None:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool="GET /documents",
                                                       reason="source no longer usable", entries=[entry_id[:256]]))
            return JSONResponse(GONE, status_code=403, headers=headers)
        self.audit.record(AuditEvent.for_principal(who, event="document", decision="allow", tool="GET /documents",
                                                   reason="redirect to the remote source", resources=[sid],
                                                   entries=[entry_id[:256]]))
        return RedirectResponse(target, status_code=302, headers=headers)
