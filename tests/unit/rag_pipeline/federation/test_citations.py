"""The record of federated results returned to each caller, and the per-caller verification cache."""
from __future__ import annotations

from services.rag_pipeline.federation.citations import CitationRecord, Cited, Verdicts
from services.rag_pipeline.federation.hits import Caller

ALICE, BOB = Caller("t1", "alice", ("eng",)), Caller("t1", "bob", ("eng",))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def cited(n: int, source: str = "s") -> Cited:
    return Cited(f"{source}:seg-{n}", source, f"seg-{n}", f"r{n}", f"https://x.example/{n}")


def test_a_citation_is_recalled_only_for_the_caller_it_was_returned_to_and_only_within_its_lifetime() -> None:
    clock = Clock()
    record = CitationRecord(ttl_s=900, now=clock)
    record.remember(ALICE, cited(1))
    assert record.recall(ALICE, "s:seg-1") == cited(1)
    assert record.recall(BOB, "s:seg-1") is None
    assert record.recall(Caller("t2", "alice"), "s:seg-1") is None          # alice of another tenant
    assert record.recall(ALICE, "s:seg-2") is None                          # never returned
    clock.t += 901
    assert record.recall(ALICE, "s:seg-1") is None and len(record) == 0


def test_the_record_is_bounded_per_caller_and_in_total_oldest_first() -> None:
    record = CitationRecord(ttl_s=900, per_caller=3, total=5)
    for n in range(5):
        record.remember(ALICE, cited(n))
    assert [record.recall(ALICE, f"s:seg-{n}") is not None for n in range(5)] == [False, False, True, True, True]
    for n in range(3):
        record.remember(BOB, cited(n))
    assert len(record) == 5
    assert record.recall(BOB, "s:seg-0") is not None and record.recall(ALICE, "s:seg-2") is None


def test_verdicts_are_kept_per_caller_for_their_lifetime_and_never_with_ttl_zero() -> None:
    clock = Clock()
    verdicts = Verdicts(ttl_s=60, now=clock)
    verdicts.put(ALICE, "s:seg-1", {"has_access": True})
    assert verdicts.get(ALICE, "s:seg-1") == {"has_access": True}
    assert verdicts.get(BOB, "s:seg-1") is None
    assert verdicts.get(Caller("t1", "alice", ("eng", "hr")), "s:seg-1") is None     # other groups: asked again
    clock.t += 61
    assert verdicts.get(ALICE, "s:seg-1") is None
    off = Verdicts(ttl_s=0)
    off.put(ALICE, "s:seg-1", {"has_access": True})
    assert off.get(ALICE, "s:seg-1") is None
