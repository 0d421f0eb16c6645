"""Fan-out: one query to every selected remote source in parallel, each under its own deadline.

    plan = federation.plan(selection, principal)     # which sources: local? + visible remotes
    hits, reports = await federation.gather(plan, query, budget_s)

Selection (`SearchRequest.sources`): empty = the local store and every enabled `rag` source
the caller may see (sources.py `visible_to`; with authentication off, every enabled source);
otherwise source ids, `"local"` naming the local store. An id the caller may not see is refused
exactly like an unknown one (InvalidArgument naming `sources` and the ids accepted), so a
caller cannot probe for sources outside its groups.

Each remote runs under min(its `timeout_s`, the budget the request has left): a slow or dead
source is cut at its deadline and reported (`timeout` / `error`) with no effect on the others;
`degraded` is set on the answer. The remote's answer is parsed into `RemoteHit`s — untrusted
text, never executed — from seed 000's `rag_get_raw_results` (with its scores and dates;
resources found by `rag_discover_resources`, cached per source for RESOURCES_TTL_S) or, for
a seed-002 server, `rag_search`. The MCP calls themselves (credentials, size limits, CLIENT
spans, audit) are remote.py's; this module opens one INTERNAL span over the whole fan-out.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, Sequence

from opentelemetry import trace

from services.rag_pipeline.federation.hits import (
    ERROR,
    LOCAL,
    OK,
    REFUSED,
    SKIPPED,
    TIMEOUT,
    Caller,
    RemoteHit,
    SourceReport,
)
from services.rag_pipeline.federation.identity import INCOMING_PATH, loop_reason, outgoing
from services.rag_pipeline.federation.filters import apply as apply_filters
from services.rag_pipeline.federation.filters import seed000_filters
from services.rag_pipeline.federation.peer_vectors import VECTORS_META, decode, keyword_facts, with_vectors
from services.rag_pipeline.federation.sources import Source, SourcesConfig
from shared.records import SearchFilters
from shared.errors import InvalidArgument
from shared.identity import Principal

tracer = trace.get_tracer("nucleus.rag_pipeline.federation")

RESOURCES_TTL_S = 60.0               # a caller's resource list at a remote is reused this long
MAX_CACHED_CALLERS = 4_096            # resource lists kept (least recently used dropped first)
MAX_REMOTE_HITS = 20                  # asked of each remote by default
MAX_SEGMENTS = 20                     # rag_search answers at most 20
MAX_TEXT_CHARS = 8_000                # of one remote hit's text kept
MAX_SELECTION = 64
CONTEXT_SEPARATOR = " › "             # how a Nucleus store joins a chunk's heading path
MAX_RESOURCES = 200                   # of one remote's discovery kept


@dataclass(frozen=True, slots=True)
class RemoteQuery:
    query: str
    phrases: tuple[str, ...]
    top_k: int = MAX_REMOTE_HITS
    caller: Caller | None = None      # the verified caller the search runs for (None: nobody in particular)
    resources: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (source id, its resource ids) to restrict to
    path: tuple[str, ...] = ()        # the stacks this query already went through (cycle guard)
    filters: SearchFilters | None = None    # the request's conditions on remote hits (filters.py)

    def resources_of(self, source_id: str) -> tuple[str, ...]:
        """The resources of `source_id` to search; () = all it has."""
        for sid, ids in self.resources:
            if sid == source_id:
                return ids
        return ()


@dataclass(frozen=True, slots=True)
class Plan:
    """Which sources a query goes to."""
    local: bool
    remotes: tuple[Source, ...] = ()
    skipped: tuple[SourceReport, ...] = ()
    federated: bool = False           # remote sources are configured (reports are given)
    loop: str = ""                    # why no remote is asked: the query came back to this stack


class RemoteSearch(Protocol):
    async def __call__(self, source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]: ...


class RemoteRefused(Exception):
    """The remote answered, and its answer is a refusal or an error of its own (seed 000's
    in-band `results.error`, a seed-002 `status: error`): reported as that source's status,
    never as "ok, 0 hits"."""

    def __init__(self, source_id: str, code: str, message: str, *, refused: bool = True) -> None:
        self.source_id, self.code, self.message = source_id, _sanitise(code, 64), _sanitise(message, 300)
        self.status = REFUSED if refused else ERROR
        super().__init__(f"source {source_id}: {self.code}: {self.message}")


#: Seed 000's error codes that mean "not for this caller" (the others are the remote's failures).
REFUSAL_CODES = frozenset({"unauthorized_user", "unauthorized_source", "invalid_source", "token_expired",
                           "forbidden", "access_denied", "permission_denied"})


def _sanitise(text: Any, limit: int) -> str:
    """A remote's words, made safe to show: printable, one line, bounded."""
    if not isinstance(text, str):
        text = "" if text is None else json.dumps(text, default=str)[:limit]
    clean = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(clean.split())[:limit]


class Federation:
    """The federation's side of a query: which sources, and their hits (module docstring)."""

    def __init__(self, config: Callable[[], SourcesConfig], search: RemoteSearch, *, stack_id: str = "") -> None:
        self._config = config
        self._search = search
        self.stack_id = stack_id

    def source_for(self, principal: Principal | None, source_id: str, tenant_id: str | None = None) -> Source | None:
        """The remote `rag` source `source_id` if the caller may use it (else None, as unknown)."""
        source = self._config().visible(principal, source_id, tenant_id if principal is None else None)
        return source if source is not None and source.kind == "rag" else None

    def loop(self) -> str:
        """Why the request being served must not go to remote sources ("" = it may): this stack
        is already on its federation path, or the path is at its hop limit (identity.py)."""
        return loop_reason(INCOMING_PATH.get(), self.stack_id)

    @property
    def search(self) -> RemoteSearch:
        return self._search

    def plan(self, selection: Sequence[str], principal: Principal | None, tenant_id: str | None = None) -> Plan:
        """The sources `principal` (of `tenant_id` when it is None: authentication off) may use,
        restricted to `selection`."""
        config = self._config()
        visible = config.visible_to(principal, tenant_id if principal is None else None)
        searchable = [s for s in visible if s.kind == "rag"]
        federated = bool(searchable)
        loop = self.loop()
        if loop and not selection:
            return Plan(local=True, federated=False, loop=loop)
        if not selection:
            return Plan(local=True, remotes=tuple(searchable), federated=federated)
        if isinstance(selection, str):
            raise InvalidArgument("sources", "must be a list of source ids, got one string")
        if len(selection) > MAX_SELECTION:
            raise InvalidArgument("sources", f"{len(selection)} ids, at most {MAX_SELECTION} accepted")
        by_id = {s.id: s for s in visible}
        unknown = [s for s in selection if s != LOCAL and s not in by_id]
        if unknown:
            accepted = ", ".join([LOCAL, *sorted(by_id)])
            raise InvalidArgument("sources", f"unknown source '{unknown[0]}'; accepted: {accepted}")
        chosen = list(dict.fromkeys(s for s in selection if s != LOCAL))
        if loop:
            return Plan(local=True, skipped=tuple(SourceReport(sid, SKIPPED, note=loop) for sid in chosen),
                        federated=True, loop=loop)
        skipped = tuple(SourceReport(sid, SKIPPED, error="a tools source has no search")
                        for sid in chosen if by_id[sid].kind != "rag")
        return Plan(local=LOCAL in selection, remotes=tuple(by_id[s] for s in chosen if by_id[s].kind == "rag"),
                    skipped=skipped, federated=True)

    async def gather(self, plan: Plan, query: RemoteQuery, budget_s: float) -> tuple[list[RemoteHit],
                                                                                     list[SourceReport]]:
        """Every remote of `plan` asked in parallel; all of them answered or cut within
        min(timeout_s, budget_s). Hits in source order, reports for every remote (skipped too)."""
        if not plan.remotes:
            return [], list(plan.skipped)
        with tracer.start_as_current_span("rag.federation.fanout") as span:
            span.set_attribute("nucleus.federation.sources", len(plan.remotes))
            results = await asyncio.gather(*(self._one(s, query, budget_s) for s in plan.remotes))
            hits = [h for found, _ in results for h in found]
            reports = [r for _, r in results] + list(plan.skipped)
            span.set_attribute("nucleus.federation.failed", sum(r.failed for r in reports))
            return hits, reports

    async def _one(self, source: Source, query: RemoteQuery, budget_s: float) -> tuple[list[RemoteHit], SourceReport]:
        deadline = max(0.001, min(source.timeout_s, budget_s))
        t0 = time.perf_counter()

        def report(status: str, count: int = 0, error: str = "") -> SourceReport:
            return SourceReport(source.id, status, (time.perf_counter() - t0) * 1000.0, count, error)

        try:
            async with asyncio.timeout(deadline):
                hits = await self._search(source, query, deadline)
        except RemoteRefused as err:
            return [], SourceReport(source.id, err.status, (time.perf_counter() - t0) * 1000.0, 0,
                                    err.message or err.code, code=err.code)
        except TimeoutError:
            return [], report(TIMEOUT, error=f"no answer within {deadline:.2f}s")
        except Exception as err:            # a remote failing in any way only fails its own part
            message = getattr(err, "message", "") or f"{type(err).__name__}: {err}"
            # A transport's own read timeout at the deadline is a timeout too, whatever it is called.
            if getattr(err, "kind", "") == "timeout" or time.perf_counter() - t0 >= 0.95 * deadline:
                return [], report(TIMEOUT, error=f"no answer within {deadline:.2f}s ({message})")
            return [], report(ERROR, error=message)
        note = getattr(hits, "note", "")
        kept, dropped = apply_filters(query.filters, list(hits))
        out = SourceReport(source.id, OK, (time.perf_counter() - t0) * 1000.0, len(kept), note=note,
                           filtered=dropped)
        return kept, out


# ---------------------------------------------------------------------------- remote answers
def _timestamp(value: Any) -> int:
    if isinstance(value, (int, float)) and value > 0:
        return int(value)
    if not isinstance(value, str) or not value.strip():
        return 0
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return 0
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return max(0, int(parsed.timestamp()))


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str(value: Any, limit: int = 2_000) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _names(value: Any) -> tuple[str, ...] | None:
    """A list of short strings a remote gave (tags, owners); None when it gave none."""
    if not isinstance(value, list):
        return None
    return tuple(v[:256] for v in value[:64] if isinstance(v, str))


def hits_from_raw_results(source_id: str, data: Any) -> list[RemoteHit]:
    """Seed 000 `rag_get_raw_results`: {"results": {"hits": [{id, score, snippet, chunk, title,
    uri, resourceId, provenance{artifact_id, source_uri}, timestamp}]}}. A hit without an id or
    text is skipped."""
    results = data.get("results") if isinstance(data, dict) else None
    check_in_band_error(source_id, results, data)
    raw = results.get("hits") if isinstance(results, dict) else None
    out: list[RemoteHit] = []
    for i, h in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(h, dict):
            continue
        text = _str(h.get("chunk"), MAX_TEXT_CHARS) or _str(h.get("snippet"), MAX_TEXT_CHARS)
        hid = _str(h.get("id"), 512)
        if not hid or not text.strip():
            continue
        prov = h.get("provenance") if isinstance(h.get("provenance"), dict) else {}
        title = _str(h.get("title"), 1_000)
        scores = prov.get("scores") if isinstance(prov.get("scores"), dict) else {}
        reputation = _score(scores.get("reputation"))
        out.append(RemoteHit(source_id=source_id, id=hid, text=text, title=title,
                             url=_str(prov.get("source_uri")) or _str(h.get("uri")),
                             artifact_id=_str(prov.get("artifact_id"), 512), score=_score(h.get("score")),
                             rank=len(out) + 1, timestamp_unix=_timestamp(h.get("timestamp")),
                             context=context_line(title, _str(prov.get("headline"), 1_000), text),
                             reputation=reputation if reputation is not None and 0.0 <= reputation <= 1.0 else None,
                             source_type=_str(prov.get("source_type"), 128) or _str(h.get("sourceType"), 128),
                             tags=_names(prov.get("tags", h.get("tags"))),
                             owners=_names(prov.get("owners", h.get("owners"))),
                             resource_id=_str(h.get("resourceId"), 512)))
    return out


def check_in_band_error(source_id: str, results: Any, data: Any) -> None:
    """Raise RemoteRefused when a seed-000 answer carries an error (`results.error`, or
    `meta_data.error`) instead of hits. A code among REFUSAL_CODES is a refusal; any other is
    the remote's failure."""
    error: Any = results.get("error") if isinstance(results, dict) else None
    if not error and isinstance(data, dict) and isinstance(data.get("meta_data"), dict):
        error = data["meta_data"].get("error")
    if not error:
        return
    if isinstance(error, dict):
        code, message = error.get("code", ""), error.get("message", "")
    else:
        code, message = error, ""
    code = _sanitise(code, 64) or "error"
    raise RemoteRefused(source_id, code, message or code, refused=code in REFUSAL_CODES)


def context_line(title: str, headline: str, text: str) -> str:
    """The context line a Nucleus store embeds and indexes with a chunk ("title › h1 › h2"),
    rebuilt from a seed-000 hit's title and headline (its heading path, else its title, else
    its first words); "" when the headline adds nothing to the title."""
    headline, title = headline.strip(), title.strip()
    words = text.split()
    first = " ".join(words[:12]) + ("…" if len(words) > 12 else "")
    if not headline or headline in (title, first):
        return ""
    parts = [title] if title else []
    for heading in headline.split(CONTEXT_SEPARATOR):
        if heading.strip() and (not parts or heading.strip().lower() != parts[-1].lower()):
            parts.append(heading.strip())
    return CONTEXT_SEPARATOR.join(parts)


def hits_from_segments(source_id: str, data: Any) -> list[RemoteHit]:
    """Seed 002 `rag_search`: {"status": "success", "segments": [{segment_uid, raw_text,
    headline, source_file_name, source_url, score?}]} (no score: rank order only)."""
    if isinstance(data, dict) and data.get("status") not in (None, "success", "ok"):
        code = _sanitise(data.get("code") or data.get("error_code") or data.get("status"), 64) or "error"
        raise RemoteRefused(source_id, code, _sanitise(data.get("error") or data.get("message") or code, 300),
                            refused=code in REFUSAL_CODES or "unauthori" in code or "forbidden" in code)
    raw = data.get("segments") if isinstance(data, dict) else None
    out: list[RemoteHit] = []
    for h in raw if isinstance(raw, list) else []:
        if not isinstance(h, dict):
            continue
        text = _str(h.get("raw_text"), MAX_TEXT_CHARS)
        hid = _str(h.get("segment_uid"), 512)
        if not hid or not text.strip():
            continue
        out.append(RemoteHit(source_id=source_id, id=hid, text=text,
                             title=_str(h.get("headline"), 1_000) or _str(h.get("source_file_name"), 1_000),
                             url=_str(h.get("source_url")), score=_score(h.get("score")), rank=len(out) + 1,
                             timestamp_unix=_timestamp(h.get("timestamp"))))
    return out


class Hits(list):
    """A remote's hits, with a note about the answer (e.g. a loop the remote reported)."""
    note: str = ""


@dataclass
class _Resources:
    listed: list[dict[str, Any]] = field(default_factory=list)
    expires: float = 0.0

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.listed]


class McpRemoteSearch:
    """`RemoteSearch` over the federation's MCP clients (remote.py `RemotePool`).

    What a source speaks (its tool list, hence its contract) is the same for every caller and is
    shared per source (remote.py caches it). What it answers for a caller — its resources, its
    hits — is per caller: resource lists are cached under the source's connection and the
    caller's `Caller.key` (tenant, user, groups, session tags), never shared between callers.
    The caller's identity goes out per request (identity.py), never fixed on the pooled session.
    A trusted remote Nucleus whose model fingerprint matched at the probe (`vectors_of`: its
    digest and dimension, else None) is asked for its hits' vectors (peer_vectors.py)."""

    def __init__(self, pool: Any, *, stack_id: str = "",
                 tenants_of: Callable[[Source], frozenset[str]] | None = None, signer: Any = None,
                 vectors_of: Callable[[Source], tuple[str, int] | None] | None = None) -> None:
        self._pool = pool
        self._vectors_of = vectors_of or (lambda source: None)
        self.stack_id = stack_id          # this stack's id, added to the path of every outgoing query
        self._tenants_of = tenants_of or (lambda source: source.tenants)
        self._signer = signer             # this stack's assertion key (assertion.py), for remote Nucleus stacks
        self._resources: OrderedDict[tuple, _Resources] = OrderedDict()

    def _send(self, source: Source, caller: Caller | None, path: tuple[str, ...]) -> Any:
        """What a call to `source` carries for `caller` (identity.py)."""
        return outgoing(source, caller, self._tenants_of(source), path=path, stack_id=self.stack_id,
                        signer=self._signer)

    async def __call__(self, source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]:
        from services.rag_pipeline.federation.remote import detect_contract    # needs the MCP client stack

        remote = self._pool.get(source)
        end = time.monotonic() + deadline_s
        send = self._send(source, query.caller, query.path)
        tools = await remote.list_tools(deadline_s=max(0.001, end - time.monotonic()))
        found = detect_contract(tools)
        wanted = query.resources_of(source.id)
        if found.seed000:
            if wanted:
                # The caller named these: ask for exactly them, the remote decides (and its refusal is reported).
                resources = list(wanted)
            else:
                resources = (await self._resources_for(source, remote, query.caller, send, end)).ids
            if resources:
                arguments: dict[str, Any] = {"username": send.username, "query": query.query,
                                             "sources": resources[:50], "top_k": min(query.top_k, 50)}
                remote_filters = seed000_filters(query.filters)
                if remote_filters and _takes(tools, "rag_get_raw_results", "filters"):
                    arguments["filters"] = remote_filters
                peer = self._vectors_of(source) if source.trusted and source.identity == "assertion" else None
                meta = {**send.meta, VECTORS_META: {"fingerprint": peer[0]}} if peer else send.meta
                result = await remote.call_tool("rag_get_raw_results", arguments,
                                                deadline_s=max(0.001, end - time.monotonic()),
                                                headers=send.headers, meta=meta)
                hits = _with_note(hits_from_raw_results(source.id, result.data), result.data)
                if peer is None:
                    return hits
                vectors, refused = decode(result.meta, peer[0], peer[1], {h.id for h in hits})
                out = Hits(with_vectors(hits, vectors, keyword_facts(result.meta, vectors)))
                out.note = hits.note or refused
                return out
        if found.seed002:
            result = await remote.call_tool("rag_search", {
                "search_phrases": list(query.phrases[:5]) or [query.query],
                "max_segments": min(query.top_k, MAX_SEGMENTS)}, deadline_s=max(0.001, end - time.monotonic()),
                headers=send.headers, meta=send.meta)
            return _with_note(hits_from_segments(source.id, result.data), result.data)
        if found.seed000:
            return Hits()                 # the seed-000 server holds no resource for this caller
        raise RuntimeError(f"source '{source.id}' speaks neither rag_get_raw_results nor rag_search")

    async def _resources_for(self, source: Source, remote: Any, caller: Caller | None, send: Any,
                             end: float, *, fresh: bool = False) -> _Resources:
        """The caller's resources at `source` (seed 000's rag_discover_resources, asked as that
        caller), cached for RESOURCES_TTL_S under the caller's key (`fresh`: asked again now)."""
        key = (source.id, hash(source), caller.key if caller is not None else None)   # any edit: asked again
        cached = self._resources.get(key)
        now = time.monotonic()
        if cached is not None and cached.expires >= now and not fresh:
            self._resources.move_to_end(key)
            return cached
        found: dict[str, dict[str, Any]] = {}
        arguments: dict[str, Any] = {"username": send.username}
        for page in range(2, MAX_RESOURCES + 2):      # the remote's pages, as its `paging` says, up to MAX_RESOURCES
            listed = await remote.call_tool("rag_discover_resources", arguments,
                                            deadline_s=max(0.001, end - time.monotonic()),
                                            headers=send.headers, meta=send.meta)
            results = listed.data.get("results") if isinstance(listed.data, dict) else None
            check_in_band_error(source.id, results, listed.data)
            shown = resources_of(listed.data)
            before = len(found)
            found.update((r["id"], r) for r in shown if r["id"] not in found)
            total = _more_than(results, len(found))
            if total is None or len(found) == before or len(found) >= MAX_RESOURCES or time.monotonic() >= end:
                break
            size = results["paging"].get("page_size")             # the remote's page size, else what it showed
            size = size if isinstance(size, int) and not isinstance(size, bool) and 0 < size <= 200 else len(shown)
            arguments = {"username": send.username, "filters": {"page": page, "page_size": size}}
        entry = _Resources(list(found.values())[:MAX_RESOURCES], time.monotonic() + RESOURCES_TTL_S)
        self._resources[key] = entry
        while len(self._resources) > MAX_CACHED_CALLERS:
            self._resources.popitem(last=False)
        return entry

    async def verify(self, source: Source, caller: Caller | None, cited: Any, deadline_s: float
                     ) -> dict[str, Any]:
        """Ask `source` whether `caller` may still open `cited` (citations.py `Cited`, as recorded
        when it was returned), as that caller: its own `verify_document_access` when it has one,
        else (seed 000) whether its `rag_discover_resources`, asked now, still lists the resource
        the hit came from. {has_access, refreshed_url?, access_level?, error?}; a source that can
        do neither cannot say: has_access false, with the reason."""
        from services.rag_pipeline.federation.remote import detect_contract    # needs the MCP client stack

        remote = self._pool.get(source)
        end = time.monotonic() + deadline_s
        tools = await remote.list_tools(deadline_s=deadline_s)
        send = self._send(source, caller, INCOMING_PATH.get())
        if not any(getattr(t, "name", "") == "verify_document_access" for t in tools):
            if not (detect_contract(tools).seed000 and cited.resource_id):
                return {"has_access": False, "error": f"source '{source.id}' cannot verify document access"}
            held = cited.resource_id in (await self._resources_for(source, remote, caller, send, end, fresh=True)).ids
            return {"has_access": held, "refreshed_url": cited.url or None, "access_level": "view" if held else None,
                    "error": None}
        arguments: dict[str, Any] = {"segment_uid": cited.remote_id}
        if send.username and _takes(tools, "verify_document_access", "username"):
            arguments["username"] = send.username
        result = await remote.call_tool("verify_document_access", arguments,
                                        deadline_s=max(0.001, end - time.monotonic()), headers=send.headers,
                                        meta=send.meta)
        data = result.data if isinstance(result.data, dict) else {}
        data = data.get("result", data) if isinstance(data.get("result"), dict) else data
        url = data.get("refreshed_url")
        return {"has_access": data.get("has_access") is True,
                "refreshed_url": url if isinstance(url, str) and url.startswith(("https://", "http://")) else None,
                "access_level": _sanitise(data.get("access_level") or "", 32) or None,
                "error": _sanitise(data.get("error") or "", 300) or None}

    async def synthesize(self, source: Source, caller: Caller | None, query: str, resources: tuple[str, ...],
                         top_k: int, deadline_s: float) -> dict[str, Any] | None:
        """The source's own answer (seed 000 `rag_get_synthesized_results`, asked as `caller`,
        over `resources` or all the caller's): {answer, citations: [{id, uri, title}]}, the
        remote's words sanitised and bounded; None when the source offers no synthesis (seed 000
        makes it optional: the answer is then synthesized here over the unified ranking)."""
        from services.rag_pipeline.federation.remote import detect_contract    # needs the MCP client stack

        remote = self._pool.get(source)
        end = time.monotonic() + deadline_s
        tools = await remote.list_tools(deadline_s=deadline_s)
        if not detect_contract(tools).synthesis:
            return None
        send = self._send(source, caller, INCOMING_PATH.get())
        wanted = list(resources) or (await self._resources_for(source, remote, caller, send, end)).ids
        result = await remote.call_tool("rag_get_synthesized_results", {
            "username": send.username, "query": query, "sources": wanted[:50], "top_k": min(top_k, 50)},
            deadline_s=max(0.001, end - time.monotonic()), headers=send.headers, meta=send.meta)
        data = result.data if isinstance(result.data, dict) else {}
        results = data.get("results") if isinstance(data.get("results"), dict) else {}
        check_in_band_error(source.id, results, data)
        answer = results.get("answer")
        citations = []
        for c in results.get("citations") if isinstance(results.get("citations"), list) else []:
            if not isinstance(c, dict):
                continue
            uri = c.get("uri")
            cid = _str(c.get("id"), 512) or _str(c.get("resourceId"), 512) or _str(uri, 512)
            citations.append({"id": f"{source.id}:{cid}", "resource_id": _str(c.get("resourceId"), 512),
                              "uri": uri if isinstance(uri, str) and uri.startswith(("https://", "http://")) else None,
                              "title": _sanitise(c.get("title") or "", 300) or None})
        return {"answer": _str(answer, MAX_TEXT_CHARS * 2), "citations": citations[:MAX_SEGMENTS]}

    async def discover(self, source: Source, caller: Caller | None, deadline_s: float) -> list[dict[str, Any]]:
        """The source's resources as it describes them to `caller` (seed 000), or the whole
        server as one resource (a seed-002 server has no discovery)."""
        from services.rag_pipeline.federation.remote import detect_contract    # needs the MCP client stack

        remote = self._pool.get(source)
        end = time.monotonic() + deadline_s
        tools = await remote.list_tools(deadline_s=deadline_s)
        if detect_contract(tools).seed000:
            send = self._send(source, caller, INCOMING_PATH.get())
            return (await self._resources_for(source, remote, caller, send, end)).listed
        return [{"id": source.id, "name": source.name or source.id, "sourceType": "mcp-server"}]


def _takes(tools: Any, name: str, argument: str) -> bool:
    """Whether the remote's tool `name` declares `argument` in its input schema."""
    return any(t.name == name and t.takes(argument) for t in tools)


def _with_note(hits: list[RemoteHit], data: Any) -> Hits:
    """The hits, with the loop a remote Nucleus reported: it answered from its own store only
    because this query had already passed through it (its notes), or one of its own sources
    did so (its per-source reports)."""
    out = Hits(hits)
    meta = data.get("meta_data") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return out
    notes = meta.get("notes") if isinstance(meta.get("notes"), list) else []
    for n in notes:
        if isinstance(n, str) and n.startswith("federation loop"):
            out.note = _sanitise(n, 300)
            return out
    reports = meta.get("sources") if isinstance(meta.get("sources"), list) else []
    for r in reports:
        note = r.get("note") if isinstance(r, dict) else None
        if isinstance(note, str) and note.startswith("federation loop"):
            out.note = _sanitise(f"{note} (reported by its source {r.get('source_id', '?')})", 300)
            return out
    return out


def resources_of(data: Any) -> list[dict[str, Any]]:
    """The resources of a seed-000 `rag_discover_resources` answer (those with an id)."""
    results = data.get("results") if isinstance(data, dict) else None
    raw = results.get("resources") if isinstance(results, dict) else None
    return [r for r in (raw if isinstance(raw, list) else [])
            if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]][:MAX_RESOURCES]


def _more_than(results: Any, have: int) -> int | None:
    """The total a seed-000 discovery answer's `paging` announces when it is more than `have`, else None."""
    paging = results.get("paging") if isinstance(results, dict) else None
    total = paging.get("total") if isinstance(paging, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > have else None


def resource_ids(data: Any) -> list[str]:
    """The resource ids of a seed-000 `rag_discover_resources` answer."""
    return [r["id"] for r in resources_of(data)]

