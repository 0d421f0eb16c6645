"""verify_document_access (seed 002): may this caller still open a segment, and a fresh link.

    verifier = DocumentVerifier(knowledge, access, signer, audit, federation, verify_ttl_s=60)
    link = verifier.cite(who, ranked_result)          # every result handed out: its signed link
    answer = await verifier.verify(call, who, segment_uid)

A local segment is re-read from the store and re-checked against the caller. A federated one
(`<source>:<remote id>`) verifies only if this caller was returned it (the citation record,
federation/citations.py: its source, resource and URL come from there, never from the uid) and
its source, asked now as this caller, still gives it access: the source's own
verify_document_access, else (seed 000) its rag_discover_resources still listing the resource the
hit came from. A source's answers are kept per caller for `verify_ttl_s` seconds.

Whatever the reason — no such segment, another tenant's, hidden by groups, source rules or
session tags, a source the caller may not use, a uid this caller was never returned, a source
that says no — the caller gets one answer, `access.same_as_missing`'s.
"""
from __future__ import annotations

from typing import Any

from services.rag_pipeline.access import AccessPolicy, same_as_missing
from services.rag_pipeline.federation.citations import CitationRecord, Cited, Verdicts
from services.rag_pipeline.federation.hits import LOCAL, Caller
from services.rag_pipeline.models import RankedResult
from services.rag_pipeline.ports import KnowledgeSource
from services.rag_pipeline.tools.calls import Call, audit_call
from services.rag_pipeline.tools.schemas import DocumentAccessOut
from shared.audit import AuditLog
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal
from shared.signing import LinkSigner


class DocumentVerifier:
    def __init__(self, knowledge: KnowledgeSource, access: AccessPolicy, signer: LinkSigner, audit: AuditLog,
                 federation: Any = None, *, verify_ttl_s: float = 60.0) -> None:
        self.ks, self.access, self.signer, self.audit, self.federation = knowledge, access, signer, audit, federation
        self.citations = CitationRecord(ttl_s=signer.ttl_s)     # as long as the links handed out with them
        self.verdicts = Verdicts(ttl_s=verify_ttl_s)

    def link(self, who: Principal, entry_id: str) -> str:
        return self.signer.sign(entry_id, who.tenant_id, who.user_id, who.groups)

    def redirect_link(self, who: Principal, entry_id: str, url: str | None) -> str:
        if not url or not url.startswith(("https://", "http://")) or len(url) > 2_048:
            return ""
        return self.signer.sign_redirect(entry_id, url, who.tenant_id, who.user_id, who.groups)

    def cite(self, who: Principal, r: RankedResult) -> str:
        """The link of a result handed to `who`: a local result's signed link; a remote result's
        signed redirect to its own http(s) URL ("" when it gave none), recorded as returned to `who`."""
        if r.source_id == LOCAL:
            return self.link(who, r.entry.id)
        return self.cite_remote(who, r.entry.id, r.resource_id, r.artifact.source_uri)

    def cite_remote(self, who: Principal, entry_id: str, resource_id: str, url: str | None) -> str:
        """A federated document (`<source>:<remote id>`) handed to `who`: recorded, and its signed
        redirect to `url` ("" when there is none)."""
        sid, _, remote_id = entry_id.partition(":")
        self.citations.remember(Caller.of(who), Cited(entry_id, sid, remote_id, resource_id, url or ""))
        return self.redirect_link(who, entry_id, url)

    def _unseen(self, call: Call, segment_uid: str, reason: str, resources: list[str] | None = None
                ) -> DocumentAccessOut:
        unseen = same_as_missing(reason)
        audit_call(self.audit, call, "deny", unseen.reason, resources=resources or [], entries=[segment_uid])
        return DocumentAccessOut(has_access=False, error=unseen.message)

    async def verify(self, call: Call, who: Principal, segment_uid: str) -> DocumentAccessOut:
        """The answer for `segment_uid` (module docstring); errors of the store propagate."""
        remote = await self._verify_remote(call, who, segment_uid)
        if remote is not None:
            return remote
        try:
            hits = await self.ks.get_entries(who.tenant_id, [segment_uid])
        except (NotFound, InvalidArgument):
            hits = []
        if not hits:
            return self._unseen(call, segment_uid, "entry not found")
        reason = self.access.entry_denial(who, hits[0])
        if reason:
            return self._unseen(call, segment_uid, reason, [hits[0].artifact.source_id])
        audit_call(self.audit, call, "allow", resources=[hits[0].artifact.source_id], entries=[segment_uid])
        return DocumentAccessOut(has_access=True, refreshed_url=self.link(who, segment_uid), access_level="view")

    async def _verify_remote(self, call: Call, who: Principal, segment_uid: str) -> DocumentAccessOut | None:
        """None: not the id of a source the caller may use (the local store answers)."""
        federation = self.federation
        if federation is None or ":" not in segment_uid:
            return None
        sid, remote_id = segment_uid.split(":", 1)
        source = federation.source_for(who, sid)
        if source is None or not remote_id:
            return None
        caller = Caller.of(who)
        cited = self.citations.recall(caller, segment_uid)
        if cited is None or cited.source_id != source.id:
            return self._unseen(call, segment_uid, f"source {sid}: not a result returned to this caller", [sid])
        answer = self.verdicts.get(caller, segment_uid)
        if answer is None:
            try:
                answer = await federation.search.verify(source, caller, cited, source.timeout_s)
            except Exception as err:         # the source failing answers "cannot verify", never allow
                message = getattr(err, "message", "") or type(err).__name__
                audit_call(self.audit, call, "deny", f"source {sid} did not verify: {message}"[:300],
                           resources=[sid], entries=[segment_uid])
                return DocumentAccessOut(has_access=False, error=f"source '{sid}' could not verify access now")
            self.verdicts.put(caller, segment_uid, answer)
        if not answer["has_access"]:
            return self._unseen(call, segment_uid, f"source {sid}: {answer.get('error') or 'no access'}", [sid])
        audit_call(self.audit, call, "allow", resources=[sid], entries=[segment_uid])
        refreshed = self.redirect_link(who, segment_uid, answer.get("refreshed_url") or cited.url)
        return DocumentAccessOut(has_access=True, refreshed_url=refreshed or None,
                                 access_level=answer.get("access_level"))
