"""What the RAG tools do: `RagTools` resolves the caller, applies the access policy, runs the
search (and synthesis) through the pipeline core and the language model, shapes the results
and audits every call.

Identity always comes from the request (shared.auth.principals.RequestIdentity); the seed-000 `username`
argument is accepted for contract compatibility and overwritten by the authenticated user.
`user_token` (seed 000's sensitive parameter) is verified here, never logged, traced, echoed
or sent to the LLM. Access rules: services/rag_pipeline/access.py.

Errors follow each tool's contract, translated in shared/mcp_errors.py: rag_search and
verify_document_access raise JSON-RPC errors (`jsonrpc_error`); the seed-000 tools report
`results.error` with an `ErrorCode` (`error_code_for`) and leave other errors to `guarded`.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.mcpserver import Context
from opentelemetry import trace

from services.rag_pipeline.access import AccessPolicy, Scope, SourceView
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.federation.discover import discover_remotes
from services.rag_pipeline.federation.hits import Caller
from services.rag_pipeline.federation.identity import INCOMING_PATH, path_from_meta
from services.rag_pipeline.federation.hits import LOCAL as LOCAL_SOURCE
from services.rag_pipeline.pages import Page, Pages
from services.rag_pipeline.models import (
    NO_VISIBLE_SOURCES,
    Preferences,
    RankedResult,
    SearchRequest,
    SearchResponse,
)
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from services.rag_pipeline.tools.calls import Call, audit_call
from services.rag_pipeline.tools.convert import (
    add_degraded,
    hit_out,
    passage_offsets,
    passage_title,
    remote_resources_out,
    remote_servers,
    resource_out,
    search_filters,
    segment_out,
    source_status_out,
    worst_code,
    worst_error,
)
from services.rag_pipeline.tools.documents import DocumentRoute
from services.rag_pipeline.tools.verify import DocumentVerifier
from services.rag_pipeline.tools.schemas import (
    DEFAULT_SEGMENTS,
    MAX_TOP_K,
    ArtifactOut,
    CitationOut,
    DiscoverFiltersIn,
    DiscoverOut,
    DiscoverResultsOut,
    DocumentAccessOut,
    ErrorOut,
    LimitsOut,
    MetaOut,
    PagingOut,
    ProvidedContextIn,
    RagSearchOut,
    RankingIn,
    RawFiltersIn,
    RawOut,
    RawResultsOut,
    RawStatsOut,
    ResourceOut,
    SourceErrorOut,
    SynthesisParamsIn,
    SynthOut,
    SynthResultsOut,
)
from shared.audit import AuditLog
from shared.auth.principals import RequestIdentity
from shared.errors import InvalidArgument, NotFound, NucleusError
from shared.identity import Principal, act_for
from shared.mcp_errors import ErrorCode, error_code_for, jsonrpc_error
from shared.records import Hit, QueryPhrases
from shared.signing import LinkSigner

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.rag_tools")


# ---------------------------------------------------------------------------- helpers
class _Refused(Exception):
    """A seed-000 call that ends with `results.error` (not a tool error)."""

    def __init__(self, code: ErrorCode, message: str, source_errors: list[SourceErrorOut] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.source_errors = source_errors or []


def _headers(ctx: Context | None) -> Mapping[str, str] | None:
    if ctx is None:
        return None
    try:
        return ctx.headers
    except ValueError:          # outside a request (direct calls in tests)
        return None


# ---------------------------------------------------------------------------- the tools
class RagTools:
    """The logic of the standard RAG tools (bound to an MCPServer by `registration`)."""

    def __init__(self, pipeline: RagPipeline, knowledge: KnowledgeSource, llm: LanguageModel,
                 identity: RequestIdentity, access: AccessPolicy, signer: LinkSigner, audit: AuditLog, *,
                 synth_timeout_s: float = 30.0, verify_ttl_s: float = 60.0) -> None:
        self.pipeline = pipeline
        self.ks = knowledge
        self.llm = llm
        self.identity = identity
        self.access = access
        self.signer = signer
        self.audit = audit
        self.synth_timeout_s = synth_timeout_s
        self.documents = DocumentRoute(knowledge, access, signer, audit, pipeline.federation)
        self.verifier = DocumentVerifier(knowledge, access, signer, audit, pipeline.federation,
                                         verify_ttl_s=verify_ttl_s)
        self.pages = Pages(pipeline, signer.derive_key("cursor"))    # cursors: a key of their own (pages.py)

    # -- identity --------------------------------------------------------------------------
    def principal(self, ctx: Context | None) -> Principal:
        """The verified caller; calls made for this tool call then carry an assertion of it (and
        remote calls the federation path this call came along, identity.py)."""
        who = self.identity.principal(_headers(ctx))
        act_for(who)
        INCOMING_PATH.set(path_from_meta(_request_meta(ctx)))
        return who

    def _caller(self, call: Call, ctx: Context | None, username: str | None, user_token: str | None) -> Principal:
        """The principal a seed-000 call runs as; the username argument never decides it."""
        who = self.principal(ctx)
        if user_token:
            who = self.identity.principal_for_user_token(user_token, who)
            act_for(who)
            call.notes.append("identity from user_token")
        call.principal = who
        self._note_loop(call)
        if username and username != who.user_id:
            call.notes.append(f"username argument {username[:64]!r} overwritten by the authenticated user")
        ignored = who.extra.get("ignored_headers")
        if ignored:
            call.notes.append(f"ignored {ignored}: the credential is not a trusted platform key")
        return who

    def _note_loop(self, call: Call) -> None:
        """A query that came back to this stack along its federation path is answered from the
        local store only (fanout.py `Federation.plan`); the answer says so."""
        loop = self.pipeline.federation.loop() if self.pipeline.federation is not None else ""
        if loop:
            call.notes.append(loop)

    def _audit(self, call: Call, decision: Literal["allow", "deny"], reason: str = "", *,
               resources: tuple[str, ...] | list[str] = (), entries: tuple[str, ...] | list[str] = ()) -> None:
        audit_call(self.audit, call, decision, reason, resources=resources, entries=entries)

    def _result_link(self, who: Principal, r: RankedResult) -> str:
        """A result's signed link, recorded as handed to `who` when it is a federated one (tools/verify.py)."""
        return self.verifier.cite(who, r)

    def _remote_selection(self, who: Principal, requested: list[str]) -> list[str]:
        """The ids among `requested` that name a remote source `who` may use, or one of its
        resources (`<source>:<resource id>`, as rag_discover_resources lists them)."""
        federation = self.pipeline.federation
        if federation is None or not requested:
            return []
        try:
            plan = federation.plan([], who)
        except NucleusError:
            return []
        remote = {s.id for s in plan.remotes}
        return [sid for sid in dict.fromkeys(requested) if sid.split(":", 1)[0] in remote]

    # -- searching -------------------------------------------------------------------------
    async def _search(self, who: Principal, query: str, scope: Scope, top_k: int, *,
                      extra_phrases: tuple[str, ...] = (), rerank: bool = False, sources: tuple[str, ...] = (),
                      resources: tuple[tuple[str, tuple[str, ...]], ...] = (), collapse: bool | None = None,
                      paged: bool = False, cursor: str | None = None, fold: bool | None = None
                      ) -> tuple[SearchResponse, list[RankedResult], Page | None]:
        """The search's answer and results; with `paged`, its page (`cursor` names a later one)."""
        request = SearchRequest(tenant_id=who.tenant_id, query=query, top_k_final=top_k,
                                prefs=Preferences(rerank=rerank, explain=True), filters=scope.filters,
                                extra_phrases=extra_phrases, sources=sources, remote_resources=resources,
                                collapse=collapse, fold_duplicates=fold)
        if not paged:
            response = await self.pipeline.search(request, who, scope=scope)
            return response, list(response.results), None
        page = await self.pages.search(request, who, cursor=cursor, scope=scope)
        return page.response, list(page.response.results), page

    async def _vet_sources(self, who: Principal, requested: list[str]) -> tuple[list[str], list[SourceErrorOut],
                                                                             dict[str, SourceView]]:
        views = await self.access.sources(who.tenant_id)
        allowed: list[str] = []
        errors: list[SourceErrorOut] = []
        for sid in dict.fromkeys(requested):
            view = views.get(sid)
            if view is None:
                errors.append(SourceErrorOut(source=sid, code="invalid_source",
                                             message=f"source '{sid}' does not exist in tenant '{who.tenant_id}'"))
            elif not view.visible_to(who.groups):
                errors.append(SourceErrorOut(source=sid, code="unauthorized_source",
                                             message=f"source '{sid}' is not visible to user '{who.user_id}'"))
            else:
                allowed.append(sid)
        return allowed, errors, views

    # -- rag_search ------------------------------------------------------------------------
    async def rag_search(self, ctx: Context | None, search_phrases: list[str],
                         max_segments: int = DEFAULT_SEGMENTS, sources: list[str] | None = None,
                         cursor: str | None = None, fold_duplicates: bool | None = None) -> RagSearchOut:
        call = Call("rag_search")
        try:
            who = self.principal(ctx)
            call.principal = who
            self._note_loop(call)
            if who.extra.get("ignored_headers"):
                call.notes.append(f"ignored {who.extra['ignored_headers']}: not a trusted platform key")
            phrases = QueryPhrases.given(search_phrases, "search_phrases")
            if who.session_tags:
                call.notes.append(f"session_tags={','.join(who.session_tags)[:300]}")
            # The caller's request as it came: the pipeline core decides the scope and the
            # sources (a caller who sees nothing and asks no remote source gets nothing).
            request = SearchRequest(tenant_id=who.tenant_id, query=phrases.keywords, top_k_final=max_segments,
                                    prefs=Preferences(explain=True), extra_phrases=phrases.extra,
                                    sources=tuple(sources or ()), fold_duplicates=fold_duplicates)
            try:
                page = await self.pages.search(request, who, cursor=cursor)
                response = page.response
            except NotFound:        # nothing ingested for this tenant yet
                self._audit(call, "allow", "tenant has no knowledge")
                return RagSearchOut(segments=[])
            if response.nothing_visible:
                self._audit(call, "allow", NO_VISIBLE_SOURCES)
                return RagSearchOut(segments=[])
            kept = list(response.results)
            segments = [segment_out(r, self._result_link(who, r), phrases.keywords) for r in kept[:max_segments]]
            if response.degraded:
                call.notes.append("degraded: " + "; ".join(response.degraded_reasons)[:300])
            self._audit(call, "allow", resources=sorted({r.artifact.source_id for r in kept}),
                        entries=[s.segment_uid for s in segments])
            federated = {"sources": source_status_out(response.sources), "degraded": response.degraded}
            out = RagSearchOut(segments=segments, search_id=response.search_id or None,
                               **(federated if response.sources else {}))
            out._page = page
            return out
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}")
            raise jsonrpc_error(err) from None

    # -- verify_document_access ------------------------------------------------------------
    async def verify_document_access(self, ctx: Context | None, segment_uid: str) -> DocumentAccessOut:
        call = Call("verify_document_access")
        try:
            who = self.principal(ctx)
            call.principal = who
            return await self.verifier.verify(call, who, segment_uid)
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}", entries=[segment_uid])
            raise jsonrpc_error(err) from None

    # -- rag_discover_resources ------------------------------------------------------------
    async def discover(self, ctx: Context | None, username: str, filters: DiscoverFiltersIn | None,
                       user_token: str | None) -> DiscoverOut:
        call = Call("rag_discover_resources")
        f = filters or DiscoverFiltersIn()
        try:
            who = self._caller(call, ctx, username, user_token)
            views = await self.access.sources(who.tenant_id)
        except NucleusError as err:
            return self._discover_refused(call, err, f)
        visible = [v for v in views.values() if v.visible_to(who.groups)]
        if f.types:
            visible = [v for v in visible if set(v.source_types) & set(f.types)]
        if f.tags:
            visible = [v for v in visible if set(v.tags) & set(f.tags)]
        if f.search:
            needle = f.search.lower()
            visible = [v for v in visible if needle in v.source_id.lower() or needle in v.name.lower()]
        visible.sort(key=lambda v: v.source_id)
        listed = [resource_out(who, v) for v in visible]
        if self.pipeline.federation is not None:
            remotes = await discover_remotes(self.pipeline.federation, who, Caller.of(who))
            if remotes:
                listed = [r.model_copy(update={"serverId": LOCAL_SOURCE, "connectionStatus": "connected"})
                          for r in listed] + [r for found in remotes for r in remote_resources_out(found)
                                              if _matches(r, f)]
        page = listed[(f.page - 1) * f.page_size: f.page * f.page_size]
        resources = page
        self._audit(call, "allow", resources=[r.id for r in resources])
        return DiscoverOut(
            results=DiscoverResultsOut(resources=resources, paging=PagingOut(page=f.page, page_size=f.page_size,
                                                                             total=len(listed))),
            meta_data=MetaOut(elapsed_ms=call.elapsed_ms, username=who.user_id, notes=call.notes or []))

    def _discover_refused(self, call: Call, err: NucleusError, f: DiscoverFiltersIn) -> DiscoverOut:
        code = error_code_for(err)
        if code is None:
            raise err
        self._audit(call, "deny", f"{code}: {err.message}")
        return DiscoverOut(
            results=DiscoverResultsOut(resources=[], paging=PagingOut(page=f.page, page_size=f.page_size, total=0),
                                       error=ErrorOut(code=code, message=err.message)),
            meta_data=MetaOut(elapsed_ms=call.elapsed_ms, username=call.principal.user_id if call.principal else "",
                              error=ErrorOut(code=code, message=err.message), notes=call.notes or []))

    # -- rag_get_raw_results ---------------------------------------------------------------
    async def raw_results(self, ctx: Context | None, username: str, query: str, sources: list[str], top_k: int,
                          filters: RawFiltersIn | None, ranking: RankingIn | None,
                          user_token: str | None, cursor: str | None = None,
                          fold_duplicates: bool | None = None) -> RawOut:
        call = Call("rag_get_raw_results")
        meta = MetaOut()
        try:
            who = self._caller(call, ctx, username, user_token)
            meta.username = who.user_id
            base = search_filters(filters)
            remote = self._remote_selection(who, sources)
            local_ids = [s for s in sources if s not in remote]
            allowed, source_errors, _views = (await self._vet_sources(who, local_ids) if local_ids
                                              else ([], [], {}))
            meta.source_errors = source_errors
            if not allowed and not remote:
                raise _Refused(worst_code(source_errors), "; ".join(e.message for e in source_errors), source_errors)
            scope = await self.pipeline.scope(who, base=base, only_sources=tuple(allowed) if allowed else None)
            servers, restrict = remote_servers(remote)
            selection = servers + ((LOCAL_SOURCE,) if allowed else ()) if remote else (LOCAL_SOURCE,)
            if ranking is not None and ranking.model:
                call.notes.append("ranking.model is not selectable here; the service's re-ranker was used")
            if scope.empty and not remote:
                response, kept, page = None, [], None
            else:
                response, kept, page = await self._search(who, query, scope, top_k,
                                                          rerank=bool(ranking and ranking.rerank),
                                                          sources=selection, resources=restrict, paged=True,
                                                          cursor=cursor, fold=fold_duplicates)
        except _Refused as refused:
            return self._raw_refused(call, meta, refused, top_k, sources)
        except NucleusError as err:
            code = error_code_for(err)
            if code is None:
                raise
            return self._raw_refused(call, meta, _Refused(code, err.message), top_k, sources)
        hits = [hit_out(r, self._result_link(who, r)) for r in kept]
        if response is not None:
            meta.degraded, meta.degraded_reasons = response.degraded, list(response.degraded_reasons)
            meta.search_id = response.search_id or None
            if response.sources:
                meta.sources = source_status_out(response.sources)
                meta.source_errors = source_errors = source_errors + [
                    SourceErrorOut(source=x.source_id, code=x.code if x.status == "refused" and x.code
                                   else "backend_unavailable", message=f"{x.status}: {x.error}")
                    for x in response.sources if x.failed]
        meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
        meta.error = worst_error(source_errors)
        self._audit(call, "allow", "; ".join(f"{e.code}: {e.source}" for e in source_errors), resources=allowed,
                    entries=[h.id for h in hits])
        per_source = {sid: sum(1 for h in hits if h.resourceId == sid) for sid in allowed}
        for sid in remote:                  # a remote result's resourceId is its source
            per_source[sid] = sum(1 for h in hits if h.resourceId == sid.split(":", 1)[0])
        out = RawOut(
            results=RawResultsOut(hits=hits, stats=RawStatsOut(
                total_found=response.candidates_considered if response is not None else 0, top_k=top_k,
                elapsed_ms=meta.elapsed_ms)),
            meta_data=meta,
            artifacts=[ArtifactOut(name="per_source_hits.json", mime_type="application/json",
                                   data=json.dumps(per_source))])
        out._page = page
        return out

    def _raw_refused(self, call: Call, meta: MetaOut, refused: _Refused, top_k: int, sources: list[str]) -> RawOut:
        self._audit(call, "deny", f"{refused.code}: {refused.message}", resources=sources)
        error = ErrorOut(code=refused.code, message=refused.message)
        meta.error, meta.elapsed_ms, meta.notes = error, call.elapsed_ms, call.notes or []
        meta.source_errors = refused.source_errors or meta.source_errors
        if call.principal is not None:
            meta.username = call.principal.user_id
        return RawOut(results=RawResultsOut(hits=[], stats=RawStatsOut(total_found=0, top_k=top_k,
                                                                       elapsed_ms=meta.elapsed_ms), error=error),
                      meta_data=meta)

    # -- rag_get_synthesized_results -------------------------------------------------------
    async def synthesized_results(self, ctx: Context | None, username: str, query: str, sources: list[str] | None,
                                  top_k: int, synthesis_params: SynthesisParamsIn | None,
                                  provided_context: ProvidedContextIn | None, user_token: str | None) -> SynthOut:
        call = Call("rag_get_synthesized_results")
        meta = MetaOut()
        params = synthesis_params or SynthesisParamsIn()
        try:
            who = self._caller(call, ctx, username, user_token)
            meta.username = who.user_id
            if not query.strip():
                raise InvalidArgument("query", "must not be empty")
            allowed: list[str] | None = None
            remote = self._remote_selection(who, sources or [])
            local_ids = [s for s in sources or [] if s not in remote]
            if local_ids:
                allowed, source_errors, _ = await self._vet_sources(who, local_ids)
                meta.source_errors = source_errors
                if not allowed and not remote:
                    raise _Refused(worst_code(source_errors), "; ".join(e.message for e in source_errors),
                                   source_errors)
            servers, restrict = remote_servers(remote)
            if len(servers) == 1 and not allowed and not (provided_context is not None and provided_context.hits):
                own = await self._remote_synthesis(call, meta, who, servers[0], dict(restrict).get(servers[0], ()),
                                                   query, top_k)
                if own is not None:             # the remote's own answer, as the caller, labelled untrusted
                    return own
            if provided_context is not None and provided_context.hits:
                passages = await self._provided(who, provided_context.hits, allowed, call)
            else:
                scope = await self.pipeline.scope(who, only_sources=tuple(allowed) if allowed else None)
                if scope.empty and not remote:
                    passages = []
                else:
                    # named sources: those only (local ones and remote ones, ranked together, remote
                    # text labelled untrusted); none named: every source (federation)
                    selection = servers + ((LOCAL_SOURCE,) if allowed else ()) if remote else (
                        (LOCAL_SOURCE,) if allowed else ())
                    try:
                        # the best chunks, not one per document: the answer's sentence may not be in
                        # its document's best chunk (docs/BENCHMARKS.md, "Extractive answers")
                        response, passages, _ = await self._search(who, query, scope, top_k, sources=selection,
                                                                   resources=restrict, collapse=False)
                    except NotFound:
                        response, passages = None, []
                    if response is not None:
                        meta.search_id, meta.degraded = response.search_id or None, response.degraded
                        meta.degraded_reasons = list(response.degraded_reasons)
            if params.model:
                call.notes.append("synthesis_params.model is not selectable here; the service's model was used")
            if not passages:
                meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
                self._audit(call, "allow", "no passages", resources=allowed or [])
                return SynthOut(results=SynthResultsOut(answer="", limits=LimitsOut(
                    truncated=False, reason="no visible passages matched the query")), meta_data=meta)
            ids = {f"S{i + 1}": r for i, r in enumerate(passages)}
            started = time.perf_counter()
            with tracer.start_as_current_span("rag.synthesize") as span:
                span.set_attribute("nucleus.passages", len(ids))
                answer = await self.llm.synthesize(
                    query, [(pid, passage_title(r), r.entry.text) for pid, r in ids.items()],
                    max_chars=params.max_chars or 0, style=params.style or "", timeout_s=self.synth_timeout_s)
            meta.latency_ms = round((time.perf_counter() - started) * 1000.0, 2)
        except _Refused as refused:
            return self._synth_refused(call, meta, refused.code, refused.message, refused.source_errors)
        except NucleusError as err:
            code = error_code_for(err)
            if code is None:
                raise
            return self._synth_refused(call, meta, code, err.message, [])
        citations = []
        for pid, _title in answer.citations:
            r = ids.get(pid)
            if r is not None:
                citations.append(CitationOut(id=r.entry.id, uri=self._result_link(who, r) or None,
                                             title=r.artifact.title or r.artifact.file_name,
                                             resourceId=r.artifact.source_id, offsets=passage_offsets(r)))
        meta.model, meta.method = answer.model or None, answer.method or None
        add_degraded(meta, answer)
        meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
        meta.error = worst_error(meta.source_errors)
        self._audit(call, "allow", resources=sorted({r.artifact.source_id for r in ids.values()}),
                    entries=[r.entry.id for r in ids.values()])
        bundle = [{"id": c.id, "title": c.title, "resourceId": c.resourceId} for c in citations]
        return SynthOut(
            results=SynthResultsOut(answer=answer.answer, citations=citations, limits=LimitsOut(
                truncated=answer.truncated, reason=answer.truncation_reason or None)),
            meta_data=meta,
            artifacts=[ArtifactOut(name="citations.json", mime_type="application/json", data=json.dumps(bundle))])

    async def _remote_synthesis(self, call: Call, meta: MetaOut, who: Principal, sid: str,
                                resources: tuple[str, ...], query: str, top_k: int) -> SynthOut | None:
        """The answer of the one remote source a synthesis names, when it offers its own (seed
        000); None: it does not, and the answer is synthesized here over the unified ranking."""
        federation = self.pipeline.federation
        source = federation.source_for(who, sid) if federation is not None else None
        if source is None or federation.loop():
            return None
        try:
            own = await federation.search.synthesize(source, Caller.of(who), query, resources, top_k,
                                                     min(source.timeout_s, self.synth_timeout_s))
        except Exception as err:              # reported like any failing source, never a made-up answer
            code = getattr(err, "code", "") or "backend_unavailable"
            message = getattr(err, "message", "") or type(err).__name__
            meta.degraded, meta.degraded_reasons = True, [f"source {sid}: {message}"]
            return self._synth_refused(call, meta, code if code in ("unauthorized_source", "unauthorized_user",
                                                                    "invalid_source", "token_expired")
                                       else "backend_unavailable", f"source {sid}: {message}", [])
        if own is None:
            return None
        call.notes.append(f"answer synthesized by remote source '{sid}': untrusted text, quoted as it came")
        meta.method, meta.elapsed_ms, meta.notes = "remote", call.elapsed_ms, call.notes or []
        cite = self.verifier.cite_remote            # the remote's own citations: recorded, links signed here
        citations = [CitationOut(id=c["id"], uri=cite(who, c["id"], c["resource_id"], c["uri"]) or None,
                                 title=c["title"], resourceId=sid) for c in own["citations"]]
        self._audit(call, "allow", resources=[sid], entries=[c.id for c in citations])
        return SynthOut(results=SynthResultsOut(answer=own["answer"], citations=citations), meta_data=meta)

    async def _provided(self, who: Principal, hits: list[Any], allowed: list[str] | None,
                        call: Call) -> list[RankedResult]:
        """Client-selected hits: only their ids are used; text is re-read from the store and each
        entry re-checked, so a client cannot smuggle in documents (or text) it may not see."""
        ids: list[str] = []
        for i, h in enumerate(hits[:MAX_TOP_K]):
            entry_id = h if isinstance(h, str) else (h.get("id") if isinstance(h, dict) else None)
            if not isinstance(entry_id, str) or not entry_id:
                raise InvalidArgument(f"provided_context.hits[{i}]", "must be an entry id or an object with an 'id'")
            ids.append(entry_id)
        try:
            found = await self.ks.get_entries(who.tenant_id, ids)
        except NotFound:
            found = []
        kept: list[Hit] = []
        for hit in found:
            if self.access.entry_denial(who, hit) or (allowed is not None and hit.artifact.source_id not in allowed):
                continue
            kept.append(hit)
        dropped = len(ids) - len(kept)
        if dropped:
            call.notes.append(f"{dropped} provided hit(s) dropped: unknown or not visible")
        return [RankedResult(entry=h.entry, artifact=h.artifact, snippet="", overall=0.0, scores=(0.0, 0.0, 0.0, 0.0),
                             explanation=None) for h in kept]

    def _synth_refused(self, call: Call, meta: MetaOut, code: ErrorCode, message: str,
                       source_errors: list[SourceErrorOut]) -> SynthOut:
        self._audit(call, "deny", f"{code}: {message}")
        error = ErrorOut(code=code, message=message)
        meta.error, meta.elapsed_ms, meta.notes = error, call.elapsed_ms, call.notes or []
        meta.source_errors = source_errors or meta.source_errors
        if call.principal is not None:
            meta.username = call.principal.user_id
        return SynthOut(results=SynthResultsOut(answer="", error=error), meta_data=meta)


def _matches(r: ResourceOut, f: DiscoverFiltersIn) -> bool:
    """A remote resource against rag_discover_resources' filters (type and name search)."""
    if f.types and r.sourceType not in f.types:
        return False
    return not f.search or f.search.lower() in r.id.lower() or f.search.lower() in r.name.lower()


def _request_meta(ctx: Context | None) -> Any:
    """The incoming request's `_meta` (None outside a request)."""
    try:
        return ctx.request_context.meta if ctx is not None else None
    except (ValueError, AttributeError):
        return None
