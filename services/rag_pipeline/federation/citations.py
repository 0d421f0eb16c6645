"""Federated citations that verify without trusting the caller's string.

    record = CitationRecord(ttl_s=link_ttl_s)
    record.remember(caller, Cited(entry_id, source_id, remote_id, resource_id, url))   # each result returned
    cited = record.recall(caller, "legal:seg-7")     # None: never returned to this caller, or expired
    verdicts = Verdicts(ttl_s=60)                    # answers a source gave, per caller
    verdicts.get(caller, "legal:seg-7") / verdicts.put(caller, "legal:seg-7", answer)

The record holds what each caller (tenant and user) was returned of federated results: the
source, the remote's id, the seed-000 resource it came from and the remote's URL. A federated
`verify_document_access` reads the resource and the URL from here, never from the segment_uid
the caller sends, so a forged uid — even one naming a resource the caller owns — finds no record
and is answered as a missing document. It lives in this process only: after a restart, or on
another replica, a citation without its record gets that same answer. Entries live as long as
the links handed out with them (`link_ttl_s`); at most MAX_PER_CALLER per caller (oldest dropped
first) and MAX_RECORDED in all (the least recently active caller's dropped first).

`Verdicts` keeps the answers sources gave (has access or not) for `ttl_s` seconds under the
caller's full key (tenant, user, groups, session tags); only answers actually obtained from the
source are kept, never a failure to ask.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from services.rag_pipeline.federation.hits import Caller

MAX_PER_CALLER = 2_000                # federated results remembered per caller
MAX_RECORDED = 200_000                # in all
MAX_VERDICTS = 20_000                 # cached verification answers, in all


@dataclass(frozen=True, slots=True)
class Cited:
    """A federated result as it was returned to a caller."""
    entry_id: str                     # `<source>:<remote id>`, the segment_uid / hit id handed out
    source_id: str
    remote_id: str                    # the remote's own id of the hit
    resource_id: str = ""             # the seed-000 resource it came from ("" = the remote did not say)
    url: str = ""                     # the remote's http(s) URL of the document ("" = none)


class CitationRecord:
    """What each caller was returned of federated results (module docstring)."""

    def __init__(self, ttl_s: float, *, per_caller: int = MAX_PER_CALLER, total: int = MAX_RECORDED,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self._per_caller, self._total, self._now = ttl_s, per_caller, total, now
        self._by_caller: OrderedDict[tuple[str, str], OrderedDict[str, tuple[float, Cited]]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def remember(self, caller: Caller, cited: Cited) -> None:
        key = (caller.tenant_id, caller.user_id)
        mine = self._by_caller.setdefault(key, OrderedDict())
        self._by_caller.move_to_end(key)
        if cited.entry_id in mine:
            mine.pop(cited.entry_id)
            self._count -= 1
        mine[cited.entry_id] = (self._now() + self.ttl_s, cited)
        self._count += 1
        while len(mine) > self._per_caller:
            mine.popitem(last=False)
            self._count -= 1
        while self._count > self._total:
            oldest_key, oldest = next(iter(self._by_caller.items()))
            oldest.popitem(last=False)
            self._count -= 1
            if not oldest:
                del self._by_caller[oldest_key]

    def recall(self, caller: Caller, entry_id: str) -> Cited | None:
        mine = self._by_caller.get((caller.tenant_id, caller.user_id))
        found = mine.get(entry_id) if mine is not None else None
        if found is None:
            return None
        if found[0] < self._now():
            del mine[entry_id]
            self._count -= 1
            return None
        return found[1]


class Verdicts:
    """Verification answers per caller, for `ttl_s` seconds (0 = none kept)."""

    def __init__(self, ttl_s: float, *, limit: int = MAX_VERDICTS, now: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self._limit, self._now = ttl_s, limit, now
        self._answers: OrderedDict[tuple, tuple[float, Any]] = OrderedDict()

    def get(self, caller: Caller, entry_id: str) -> Any:
        key = (caller.key, entry_id)
        found = self._answers.get(key)
        if found is None or found[0] < self._now():
            self._answers.pop(key, None)
            return None
        return found[1]

    def put(self, caller: Caller, entry_id: str, answer: Any) -> None:
        if self.ttl_s <= 0:
            return
        key = (caller.key, entry_id)
        self._answers[key] = (self._now() + self.ttl_s, answer)
        self._answers.move_to_end(key)
        while len(self._answers) > self._limit:
            self._answers.popitem(last=False)
