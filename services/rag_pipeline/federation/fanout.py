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
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, Sequence

from opentelemetry import trace

from services.rag_pipeline.federation.hits import (
    ERROR,
    LOCAL,
    OK,
    SKIPPED,
    TIMEOUT,
    RemoteHit,
    SourceReport,
)
from services.rag_pipeline.federation.sources import Source, SourcesConfig
from shared.errors import InvalidArgument
from shared.identity import Principal

tracer = trace.get_tracer("nucleus.rag_pipeline.federation")

RESOURCES_TTL_S = 60.0
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
    username: str = ""                # the verified user the search runs for (seed-000 `username`)
    resources: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (source id, its resource ids) to restrict to

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


class RemoteSearch(Protocol):
    async def __call__(self, source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]: ...


class Federation:
    """The federation's side of a query: which sources, and their hits (module docstring)."""

    def __init__(self, config: Callable[[], SourcesConfig], search: RemoteSearch) -> None:
        self._config = config
        self._search = search

    @property
    def search(self) -> RemoteSearch:
        return self._search

    def plan(self, selection: Sequence[str], principal: Principal | None) -> Plan:
        config = self._config()
        enabled = [s for s in config.sources if s.enabled]
        visible = enabled if principal is None else config.visible_to(principal)
        searchable = [s for s in visible if s.kind == "rag"]
        federated = bool(searchable)
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
        except TimeoutError:
            return [], report(TIMEOUT, error=f"no answer within {deadline:.2f}s")
        except Exception as err:            # a remote failing in any way only fails its own part
            message = getattr(err, "message", "") or f"{type(err).__name__}: {err}"
            # A transport's own read timeout at the deadline is a timeout too, whatever it is called.
            if getattr(err, "kind", "") == "timeout" or time.perf_counter() - t0 >= 0.95 * deadline:
                return [], report(TIMEOUT, error=f"no answer within {deadline:.2f}s ({message})")
            return [], report(ERROR, error=message)
        return hits, report(OK, len(hits))


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


def hits_from_raw_results(source_id: str, data: Any) -> list[RemoteHit]:
    """Seed 000 `rag_get_raw_results`: {"results": {"hits": [{id, score, snippet, chunk, title,
    uri, resourceId, provenance{artifact_id, source_uri}, timestamp}]}}. A hit without an id or
    text is skipped."""
    results = data.get("results") if isinstance(data, dict) else None
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
                             reputation=reputation if reputation is not None and 0.0 <= reputation <= 1.0 else None))
    return out


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


@dataclass
class _Contract:
    raw: bool
    search: bool
    resources: list[str] = field(default_factory=list)
    listed: list[dict[str, Any]] = field(default_factory=list)
    expires: float = 0.0


class McpRemoteSearch:
    """`RemoteSearch` over the federation's MCP clients (remote.py `RemotePool`)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._contracts: dict[tuple[str, int], _Contract] = {}

    async def __call__(self, source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]:
        remote = self._pool.get(source)
        end = time.monotonic() + deadline_s
        contract = await self._contract(source, remote, query.username, end)
        left = max(0.001, end - time.monotonic())
        wanted = query.resources_of(source.id)
        resources = [r for r in contract.resources if not wanted or r in wanted]
        if contract.raw and resources:
            result = await remote.call_tool("rag_get_raw_results", {
                "username": query.username, "query": query.query, "sources": resources[:50],
                "top_k": min(query.top_k, 50)}, deadline_s=left)
            return hits_from_raw_results(source.id, result.data)
        if contract.search:
            result = await remote.call_tool("rag_search", {
                "search_phrases": list(query.phrases[:5]) or [query.query],
                "max_segments": min(query.top_k, MAX_SEGMENTS)}, deadline_s=left)
            return hits_from_segments(source.id, result.data)
        if contract.raw:
            return []                     # the seed-000 server holds no resource for this user
        raise RuntimeError(f"source '{source.id}' speaks neither rag_get_raw_results nor rag_search")

    async def _contract(self, source: Source, remote: Any, username: str, end: float) -> _Contract:
        """What the source speaks and its resources (cached for RESOURCES_TTL_S)."""
        from services.rag_pipeline.federation.remote import detect_contract    # needs the MCP client stack

        key = (source.id, hash(source))
        contract = self._contracts.get(key)
        if contract is None or contract.expires < time.monotonic():
            tools = await remote.list_tools(deadline_s=max(0.001, end - time.monotonic()))
            found = detect_contract(tools)
            contract = _Contract(raw=found.seed000, search=found.seed002)
            if contract.raw:
                listed = await remote.call_tool("rag_discover_resources", {"username": username},
                                                deadline_s=max(0.001, end - time.monotonic()))
                contract.listed = resources_of(listed.data)
                contract.resources = [r["id"] for r in contract.listed]
            contract.expires = time.monotonic() + RESOURCES_TTL_S
            self._contracts[key] = contract
        return contract

    async def discover(self, source: Source, username: str, deadline_s: float) -> list[dict[str, Any]]:
        """The source's resources as it describes them (seed 000), or the whole server as one
        resource (a seed-002 server has no discovery)."""
        contract = await self._contract(source, self._pool.get(source), username, time.monotonic() + deadline_s)
        if contract.raw:
            return contract.listed
        return [{"id": source.id, "name": source.name or source.id, "sourceType": "mcp-server"}]


def resources_of(data: Any) -> list[dict[str, Any]]:
    """The resources of a seed-000 `rag_discover_resources` answer (those with an id)."""
    results = data.get("results") if isinstance(data, dict) else None
    raw = results.get("resources") if isinstance(results, dict) else None
    return [r for r in (raw if isinstance(raw, list) else [])
            if isinstance(r, dict) and isinstance(r.get("id"), str) and r["id"]][:MAX_RESOURCES]


def resource_ids(data: Any) -> list[str]:
    """The resource ids of a seed-000 `rag_discover_resources` answer."""
    return [r["id"] for r in resources_of(data)]

