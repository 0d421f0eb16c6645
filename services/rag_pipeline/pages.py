"""Pages of one search: `cursor` in, `next_cursor` out (search_and_rank, rag_get_raw_results,
rag_search, gRPC SearchAndRank; docs/MCP.md "Pages").

    page = await pages.search(request, principal, cursor=cursor, scope=scope)
    page.response.results          # this page's results, best first
    page.cursor_after(n)           # the cursor of the page after the first n of them (None: no more)

The first page (no cursor) is the search as any search answers it, so a search nobody pages
costs nothing more; a full page gets a cursor and is remembered here, keyed by the caller
(tenant, end user, auth method) and a random request id, with what the first page ranked
(capture.py: its candidates and their ranking configuration, no texts). The second page ranks
those same candidates `MAX_PAGES` pages deep (at most `MAX_DEPTH` results) with the same `rank`,
without embedding or retrieving again (~0.2x a fresh search's p50, docs/BENCHMARKS.md), and holds
that ranking; a first page ranked otherwise (a learned model, folded copies) or holding remote
results is searched again once, that deep, from the same candidates (top_k_initial pinned). Every
later page is read from the held ranking, never ranked again, so pages neither repeat nor skip a
result. Every page reads
its entries again from the store as the caller (the fetch stage's `GetEntries`) and re-checks
them with the access policy: a document deleted or hidden since the first page is dropped,
and the page filled from the next ones.

Held rankings are bounded: `MAX_PER_CALLER` per caller (its oldest goes first), `MAX_HELD` in
all (the oldest goes first), each for `TTL_S` seconds after its first page. A cursor is an
HMAC over its claims (tenant, user, auth method, request id, the request's fingerprint,
offset, expiry) with a key derived for cursors only (`LinkSigner.derive_key`), never the link
key: a cursor is not a document link, nor a link a cursor. A forged, expired or foreign cursor,
one given with another request, or one whose ranking this process does not hold (restarted,
another replica, evicted) is InvalidArgument naming `cursor`: search again without one.

Search ids: every search given a search id (feedback.py `SearchLog`, which tells `_asked`) has
its request held, as sent, without any ranking (`_ASKED`), so that a why-not names it by its id
(`held_request`, why_not.py) for the same caller only, for `TTL_S`; a full first page's held
ranking replaces that entry and keeps the request too, and each later page's search id names the
same request. Requests held alone and held rankings are bounded apart: `MAX_PER_CALLER` of each
per caller, `MAX_HELD` of both in all. Each holds the tenant's data id its first page read
(ports.py `data_id`): once a read answers with another one (a restore or an import replaced the
tenant's data), its cursors and search id are refused and it is forgotten.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ranking import rank
from services.rag_pipeline.access import Scope
from services.rag_pipeline.capture import CAPTURE, Captured
from services.rag_pipeline.federation.hits import LOCAL
from services.rag_pipeline.merge import placeholder_hit
from services.rag_pipeline.models import RankedResult, SearchRequest, SearchResponse
from services.rag_pipeline.results import build_results
from services.rag_pipeline.results import highlights, make_snippet
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal, acting_for

if TYPE_CHECKING:
    from services.rag_pipeline.core import RagPipeline

MAX_PAGES = 5                 # a first page is ranked this many pages deep ...
MAX_DEPTH = 100               # ... and at most this many results
TTL_S = 600                   # a held ranking, and its cursors, live 10 minutes after the first page
MAX_PER_CALLER = 8            # rankings held per caller (tenant, user, auth method), and requests held alone
MAX_HELD = 2_000              # rankings and requests held in all, by this process
MAX_CURSOR_CHARS = 1_024
_VERSION = "nucleus-cursor-v1"
AGAIN = "search again without a cursor"
_ASKED = "asked:"             # the key of a search held for its request alone: "asked:" + its search id

CallerKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class _Held:
    fingerprint: str
    query: str
    results: tuple[RankedResult, ...] | None  # the deep ranking, best first (local texts dropped); None: not yet
    expires_unix: int
    answer: SearchResponse                  # the first page's answer without results (search id, profile)
    request: SearchRequest | None = None    # as the caller sent it (a why-not names it by its search id)
    data_id: str = ""                       # the copy of the tenant's data it was ranked on (ports.py)
    replay: "_Replay | None" = None         # what the first page ranked, until the second page ranks it deep
    later_ids: tuple[str, ...] = ()         # the search ids of its later pages (each names `request` too)


@dataclass(frozen=True, slots=True)
class _Replay:
    """What a first page ranked by the 4R blend alone, over local candidates only (capture.py):
    the second page ranks these same candidates deeper instead of searching again."""
    merged: list
    candidates: Any
    config: Any
    shown: tuple[RankedResult, ...]         # the first page's results
    now_unix: float
    explain: bool

    @staticmethod
    def of(captured: Captured, shown: tuple[RankedResult, ...]) -> "_Replay | None":
        """None when the first page's order is not the blend's (a learned model, folded copies) or
        it holds remote results: the second page then searches again, deeper (module docstring)."""
        if (not captured.merged or captured.request is None or captured.learned is not None or captured.folded
                or any(m.origin for m in captured.merged)):
            return None
        for m in captured.merged:               # the texts of the first page: read again for a page
            m.hit = None
        return _Replay(captured.merged, captured.candidates, captured.config, shown, captured.now_unix,
                       captured.request.prefs.explain)

    def ranking(self, depth: int, tenant_id: str, query: str) -> tuple[RankedResult, ...]:
        """The first page's results, then the next best of the same candidates up to `depth`,
        ranked by the same `rank` (ties: the lower row first, as the first page's)."""
        shown = {r.entry.id for r in self.shown}
        deep = rank(self.candidates, self.config, min(depth + len(shown), len(self.merged)))
        keep = np.asarray([i for i, row in enumerate(deep.rows.tolist())
                           if self.merged[row].entry_id not in shown][:max(0, depth - len(self.shown))], np.intp)
        deep = deep.take(keep)
        for row in deep.rows.tolist():          # ids and signals only: each page reads its texts
            self.merged[row].hit = placeholder_hit(self.merged[row], tenant_id)
        tail = build_results(self.merged, deep, self.candidates, self.config, query, self.explain,
                             now_unix=self.now_unix)
        return (*(_slim(r) for r in self.shown), *tail)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a search: its response, and where each of its results sits in the ranking."""
    response: SearchResponse
    positions: tuple[int, ...]              # each result's place in the held ranking
    end: int                                # the place after the last one this page looked at
    cursor_at: Callable[[int], str | None]  # the cursor of a page starting at a place (None: past the end)

    def cursor_after(self, shown: int) -> str | None:
        """The next page's cursor when the first `shown` results of this page were shown (a
        budget may show fewer: the next page then starts at the first one left out)."""
        return self.cursor_at(self.end if shown >= len(self.positions) else self.positions[shown])


def caller_key(principal: Principal | None, tenant_id: str) -> CallerKey:
    if principal is None:                   # authentication off: the tenant's trusted network
        return (tenant_id, "", "none")
    return (principal.tenant_id, principal.user_id, principal.auth_method)


def fingerprint(request: SearchRequest) -> str:
    """The request as the caller sent it (its page size included): a cursor works with it only.
    A query vector is hashed as its float32 bytes (its repr would cost more than the hash)."""
    digest = hashlib.sha256(repr(replace(request, tenant_id="", query_vector=None)).encode("utf-8"))
    if request.query_vector is not None:
        digest.update(np.asarray(request.query_vector, np.float32).tobytes())
    return digest.hexdigest()[:32]


def _slim(r: RankedResult) -> RankedResult:
    """A held local result without its texts (and its folded copies' alike): read again for its page."""
    return replace(r, entry=replace(r.entry, text="", content_summary=""), snippet="", highlights=(),
                   duplicates=tuple(_slim(d) for d in r.duplicates))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Pages:
    """The held rankings of this process and the cursors that read them (module docstring)."""

    def __init__(self, pipeline: "RagPipeline", key: bytes | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._pipeline = pipeline
        self._key = key or secrets.token_bytes(32)
        self._clock = clock
        self._held: OrderedDict[tuple[CallerKey, str], _Held] = OrderedDict()
        self._by_caller: dict[CallerKey, list[str]] = {}     # each caller's held request ids, oldest first
        if pipeline is not None:                              # (None: cursor tests only)
            pipeline.search_log.listeners.append(self._asked)

    # -- cursors ---------------------------------------------------------------------------
    def _mac(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, _VERSION.encode() + b"\x00" + payload, hashlib.sha256).digest())

    def _cursor(self, who: CallerKey, rid: str, fp: str, offset: int, exp: int) -> str:
        payload = json.dumps([*who, rid, fp, offset, exp], separators=(",", ":")).encode("utf-8")
        return f"{_b64(payload)}.{self._mac(payload)}"

    def _claims(self, cursor: str, who: CallerKey, fp: str) -> tuple[str, int]:
        """(request id, offset) of a valid cursor of this caller and request."""
        head, dot, sig = cursor.partition(".") if len(cursor) <= MAX_CURSOR_CHARS else ("", "", "")
        try:
            payload = _unb64(head) if dot else b""
        except ValueError:
            payload = b""
        if not payload or not hmac.compare_digest(self._mac(payload).encode(), sig.encode("ascii", "replace")):
            raise InvalidArgument("cursor", f"is not a cursor this server issued; {AGAIN}")
        tenant, user, method, rid, cursor_fp, offset, exp = json.loads(payload)
        if exp < int(self._clock()):
            raise InvalidArgument("cursor", f"has expired (cursors live {TTL_S} s); {AGAIN}")
        if not all(hmac.compare_digest(a.encode(), b.encode()) for a, b in zip((tenant, user, method), who)):
            raise InvalidArgument("cursor", f"was issued to another caller; {AGAIN}")
        if cursor_fp != fp:
            raise InvalidArgument("cursor", f"belongs to another search request (give the same arguments); {AGAIN}")
        return rid, offset

    # -- pages -----------------------------------------------------------------------------
    async def search(self, request: SearchRequest, principal: Principal | None, *, cursor: str | None = None,
                     scope: Scope | None = None) -> Page:
        """The first page (`cursor` empty) or the page `cursor` names (module docstring)."""
        who = caller_key(principal, self._pipeline.tenant_for(request.tenant_id, principal))
        if cursor:
            fp = fingerprint(request)
            rid, offset = self._claims(cursor, who, fp)
            held = await self._ranked(self._get(who, rid), rid, request, principal, scope, who)
            size = self._pipeline.validate(replace(request, tenant_id=who[0])).top_k_final
            return await self._later(request, held, rid, who, fp, offset, size, principal)
        return await self._first(request, principal, scope, who)

    async def _first(self, request: SearchRequest, principal: Principal | None, scope: Scope | None,
                     who: CallerKey) -> Page:
        captured = Captured()
        token = CAPTURE.set(captured)
        try:
            response = await self._pipeline.search(request, principal, scope=scope)
        finally:
            CAPTURE.reset(token)
        shown = tuple(range(len(response.results)))
        asked = self._pipeline.validate(replace(request, tenant_id=who[0]))
        if len(shown) < asked.top_k_final:
            return Page(response, shown, len(shown), lambda _offset: None)
        self._forget((who, _ASKED + response.search_id))      # held with its ranking instead
        rid, exp, fp = secrets.token_urlsafe(12), int(self._clock()) + TTL_S, fingerprint(request)
        self._put(who, rid, _Held(fp, asked.query, None, exp, replace(response, results=(), timings=()), request,
                                  self._pipeline.knowledge.data_id(who[0]), _Replay.of(captured, response.results)))
        return Page(response, shown, len(shown), lambda offset: self._cursor(who, rid, fp, offset, exp))

    async def _ranked(self, held: _Held, rid: str, request: SearchRequest, principal: Principal | None,
                      scope: Scope | None, who: CallerKey) -> _Held:
        """`held` with its deep ranking, made by the second page's call (module docstring)."""
        if held.results is not None:
            return held
        asked = self._pipeline.validate(replace(request, tenant_id=who[0]))
        size = asked.top_k_final
        depth = max(size, min(size * MAX_PAGES, MAX_DEPTH, asked.top_k_initial))
        if held.replay is not None:
            slim = held.replay.ranking(depth, who[0], asked.query)
        else:
            deep = replace(request, top_k_final=depth, top_k_initial=asked.top_k_initial)
            ranking = (await self._pipeline.search_for(deep, principal, scope)).results    # not logged: pages are
            slim = tuple(r if r.source_id != LOCAL else _slim(r) for r in ranking)   # a local text: read again
        held = replace(held, results=slim, replay=None)
        self._held[(who, rid)] = held
        return held

    def _cursor_at(self, who: CallerKey, rid: str, fp: str, exp: int, total: int) -> Callable[[int], str | None]:
        return lambda offset: self._cursor(who, rid, fp, offset, exp) if offset < total else None

    async def _later(self, request: SearchRequest, held: _Held, rid: str, who: CallerKey, fp: str, offset: int,
                     size: int, principal: Principal | None) -> Page:
        """`size` results from `offset` on that the caller may still see, read again from the store."""
        kept: list[RankedResult] = []
        positions: list[int] = []
        at = offset
        while len(kept) < size and at < len(held.results):
            chunk = list(range(at, min(len(held.results), at + size - len(kept))))
            found = await self._still_visible([held.results[i] for i in chunk], held.query, who[0], principal)
            for i, result in zip(chunk, found):
                if result is not None:
                    kept.append(result)
                    positions.append(i)
            at = chunk[-1] + 1
        self._check_data(who, rid, held, "cursor")
        answer = replace(held.answer, results=tuple(kept), search_id="")
        # the page's own search id, naming what it shows (a vote is checked against it, feedback.py),
        # and naming the held request (not held again: one entry per search)
        answer = self._pipeline.search_log.record(answer, request, principal, who[0], tell=False)
        if answer.search_id and (who, rid) in self._held:
            self._held[(who, rid)] = replace(held, later_ids=(*held.later_ids, answer.search_id))
        return Page(answer, tuple(positions), at,
                    self._cursor_at(who, rid, fp, held.expires_unix, len(held.results)))

    async def _still_visible(self, results: list[RankedResult], query: str, tenant: str,
                             principal: Principal | None) -> list[RankedResult | None]:
        """Each result re-read from its source as the caller (None: deleted, hidden or unusable now)."""
        local = [c.entry.id for r in results if r.source_id == LOCAL for c in (r, *r.duplicates)]
        hits = {}
        if local:
            with acting_for(principal):
                try:
                    hits = {h.entry.id: h for h in await self._pipeline.knowledge.get_entries(tenant, local)}
                except NotFound:
                    hits = {}
        out: list[RankedResult | None] = []
        federation = self._pipeline.federation
        for r in results:
            if r.source_id != LOCAL:        # a remote result: while the caller may still use its source
                usable = principal is None or (federation is not None and
                                               federation.source_for(principal, r.source_id) is not None)
                out.append(r if usable else None)
                continue
            # a folded group (merge.py): the copies still visible, the first of them representing it
            copies = [(c, h) for c in (r, *r.duplicates) if (h := hits.get(c.entry.id)) is not None
                      and not (principal is not None and self._pipeline.access.entry_denial(principal, h))]
            if not copies:
                out.append(None)
                continue
            (first, hit), rest = copies[0], copies[1:]
            snippet = make_snippet(hit.entry.text, query)
            out.append(replace(first, entry=hit.entry, artifact=hit.artifact, snippet=snippet,
                               highlights=highlights(snippet, query),
                               duplicates=tuple(replace(c, entry=h.entry, artifact=h.artifact) for c, h in rest)))
        return out

    # -- the held rankings -----------------------------------------------------------------
    def _asked(self, response: SearchResponse, request: SearchRequest, principal: Principal | None,
               tenant_id: str) -> None:
        """Hold the request of a search just given a search id, without a ranking (module docstring)."""
        who = caller_key(principal, tenant_id)
        self._put(who, _ASKED + response.search_id, _Held(
            "", request.query, (), int(self._clock()) + TTL_S, SearchResponse((), search_id=response.search_id),
            request, self._pipeline.knowledge.data_id(who[0])))

    def _put(self, who: CallerKey, rid: str, held: _Held) -> None:
        """Hold `held`, first forgetting the expired (the oldest are first: one TTL for all), the
        caller's oldest of its kind (a ranking, a request alone) beyond `MAX_PER_CALLER` and the
        oldest beyond `MAX_HELD`: no scan of all."""
        now = int(self._clock())
        while self._held and next(iter(self._held.values())).expires_unix < now:
            self._forget(next(iter(self._held)))
        alone = rid.startswith(_ASKED)
        mine = [r for r in self._by_caller.get(who, ()) if r.startswith(_ASKED) == alone]
        for old in mine[:max(0, len(mine) - MAX_PER_CALLER + 1)]:
            self._forget((who, old))
        while len(self._held) >= MAX_HELD:
            self._forget(next(iter(self._held)))
        self._held[(who, rid)] = held
        self._by_caller.setdefault(who, []).append(rid)

    def _forget(self, key: tuple[CallerKey, str]) -> None:
        self._held.pop(key, None)
        mine = self._by_caller.get(key[0], [])
        if key[1] in mine:
            mine.remove(key[1])
        if not mine:
            self._by_caller.pop(key[0], None)

    def held_request(self, principal: Principal | None, tenant_id: str, search_id: str) -> SearchRequest:
        """The request of this caller's recent search `search_id` (why_not.py): any search of theirs
        given a search id within `TTL_S` (its page's or a later page's) and not yet evicted; any
        other id, another caller's included, is refused alike."""
        who = caller_key(principal, self._pipeline.tenant_for(tenant_id, principal))
        now = int(self._clock())
        asked = search_id.encode("utf-8", "replace")
        for rid in list(self._by_caller.get(who, ())):
            held = self._held.get((who, rid))
            if (held is not None and held.request is not None and held.expires_unix >= now
                    and any(s and hmac.compare_digest(s.encode(), asked)
                            for s in (held.answer.search_id, *held.later_ids))):
                self._check_data(who, rid, held, "search_id")
                return held.request
        raise InvalidArgument("search_id", f"names no search of yours this server holds (one of your last "
                                           f"{MAX_PER_CALLER} searches, for {TTL_S} s); give the search request "
                                           "instead")

    def _check_data(self, who: CallerKey, rid: str, held: _Held, field: str) -> None:
        """A held ranking of data a restore or an import has replaced since is forgotten and refused."""
        if held.data_id != self._pipeline.knowledge.data_id(who[0]):
            self._forget((who, rid))
            again = AGAIN if field == "cursor" else "give the search request instead"
            raise InvalidArgument(field, f"names a search of data replaced since (a restore or an import of the "
                                         f"tenant); {again}")

    def _get(self, who: CallerKey, rid: str) -> _Held:
        held = self._held.get((who, rid))
        if held is None or held.expires_unix < int(self._clock()):
            raise InvalidArgument("cursor", "names a ranking this server does not hold (it restarted, another "
                                            f"replica answered the first page, or the ranking was evicted); {AGAIN}")
        return held
