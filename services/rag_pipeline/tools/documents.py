"""GET /documents/{entry_id}: the target of every signed link the RAG tools hand out
(`source_url`, `uri`, `refreshed_url`).

The link's signature names the tenant, user and groups it was issued to; the entry is re-read
from the knowledge source and its access re-checked at every open (ignoring session tags,
which a browser opening the link does not carry). Every open is audited.
"""
from __future__ import annotations

from dataclasses import replace
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.ports import KnowledgeSource
from services.rag_pipeline.tools.calls import Call, audit_call
from shared.audit import AuditEvent, AuditLog
from shared.errors import InvalidArgument, NotFound, NucleusError
from shared.identity import Principal, act_for
from shared.signing import DOCUMENT_PREFIX, LinkRejected, LinkSigner

RESPONSE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                    "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'"}


class DocumentRoute:
    """The signed-link document route; `open_document` is its Starlette endpoint."""

    def __init__(self, knowledge: KnowledgeSource, access: AccessPolicy, signer: LinkSigner, audit: AuditLog) -> None:
        self.ks = knowledge
        self.access = access
        self.signer = signer
        self.audit = audit

    async def open_document(self, request: Request) -> Response:
        entry_id = request.path_params.get("entry_id", "")
        call = Call("GET /documents")
        headers = dict(RESPONSE_HEADERS)
        try:
            claims = self.signer.verify_link(f"{DOCUMENT_PREFIX}{quote(entry_id, safe='')}?{request.url.query}")
        except LinkRejected as err:
            self.audit.record(AuditEvent(event="document", decision="deny", tool=call.tool, reason=f"link {err.reason}",
                                         entries=(entry_id[:256],)))
            return JSONResponse({"error": f"link {err.reason}", "message": err.message}, status_code=403,
                                headers=headers)
        who = Principal(tenant_id=claims.tenant_id, user_id=claims.user_id, groups=claims.groups,
                        auth_method="signed_link")
        call.principal = who
        act_for(who)            # the store re-checks tenant and groups for this user too
        try:
            hits = await self.ks.get_entries(who.tenant_id, [claims.entry_id])
        except (NotFound, InvalidArgument):
            hits = []
        except NucleusError as err:
            audit_call(self.audit, call, "deny", f"{err.kind}: {err.message}", entries=[claims.entry_id])
            return JSONResponse({"error": "backend_unavailable"}, status_code=503, headers=headers)
        if not hits:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason="entry not found", entries=[claims.entry_id]))
            return JSONResponse({"error": "not_found"}, status_code=404, headers=headers)
        reason = self.access.entry_denial(replace(who, session_tags=()), hits[0])
        if reason:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason=reason, resources=[hits[0].artifact.source_id],
                                                       entries=[claims.entry_id]))
            return JSONResponse({"error": "forbidden"}, status_code=403, headers=headers)
        self.audit.record(AuditEvent.for_principal(who, event="document", decision="allow", tool=call.tool,
                                                   resources=[hits[0].artifact.source_id], entries=[claims.entry_id]))
        return PlainTextResponse(hits[0].entry.text, headers=headers)
