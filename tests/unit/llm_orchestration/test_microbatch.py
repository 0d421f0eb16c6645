"""The micro-batcher's scheduling, with a plain deterministic encode function."""
import asyncio

import numpy as np
import pytest

from services.llm_orchestration.microbatch import CONCURRENCY_WINDOW_S, MicroBatcher
from shared.errors import ResourceExhausted, Unavailable


class Encoder:
    """Encodes text i as a row [len(text), hash-ish]; records each batch; can be held."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        await self.gate.wait()
        return np.array([[len(t), sum(map(ord, t))] for t in texts], dtype=np.float32)


def expected(texts: list[str]) -> np.ndarray:
    return np.array([[len(t), sum(map(ord, t))] for t in texts], dtype=np.float32)


async def test_concurrent_requests_share_one_batch_and_get_their_own_rows():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=5.0, max_size=6)
    await batcher.start()
    requests = [["a"], ["bb", "ccc"], ["dddd"], ["eeeee", "ffffff"]]   # 6 texts: fills the batch
    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(r) for r in requests)), timeout=5)
    assert enc.batches == [["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]]
    for req, rows in zip(requests, results):
        np.testing.assert_array_equal(rows, expected(req))
    await batcher.close()


async def test_a_lone_request_waits_at_most_max_wait():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.01, max_size=64)
    await batcher.start()
    rows = await asyncio.wait_for(batcher.submit(["only"]), timeout=5)   # would hang if unbounded
    np.testing.assert_array_equal(rows, expected(["only"]))
    assert enc.batches == [["only"]]
    await batcher.close()


async def test_requests_arriving_during_an_encode_form_the_next_batch():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=64)
    await batcher.start()
    enc.gate.clear()
    first = asyncio.create_task(batcher.submit(["first"]))
    while not enc.batches:
        await asyncio.sleep(0)
    later = [asyncio.create_task(batcher.submit([f"later{i}"])) for i in range(5)]
    await asyncio.sleep(0)
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *later), timeout=5)
    assert enc.batches == [["first"], [f"later{i}" for i in range(5)]]
    await batcher.close()


async def test_coalescing_off_encodes_each_request_alone():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=1)
    await batcher.start()
    await asyncio.wait_for(asyncio.gather(*(batcher.submit([str(i)]) for i in range(4))), timeout=5)
    assert enc.batches == [["0"], ["1"], ["2"], ["3"]]
    await batcher.close()


async def test_an_encode_error_reaches_every_caller_in_the_batch():
    async def broken(texts: list[str]) -> np.ndarray:
        raise Unavailable("model exploded")

    batcher = MicroBatcher(broken, max_wait_s=1.0, max_size=2)
    await batcher.start()
    results = await asyncio.wait_for(asyncio.gather(batcher.submit(["a"]), batcher.submit(["b"]),
                                                    return_exceptions=True), timeout=5)
    assert all(isinstance(r, Unavailable) for r in results)
    await batcher.close()


async def test_a_cancelled_caller_does_not_break_the_batch_for_others():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.05, max_size=64)
    await batcher.start()
    gone = asyncio.create_task(batcher.submit(["gone"]))
    stay = asyncio.create_task(batcher.submit(["stay"]))
    await asyncio.sleep(0)
    gone.cancel()
    rows = await asyncio.wait_for(stay, timeout=5)
    np.testing.assert_array_equal(rows, expected(["stay"]))
    assert enc.batches == [["stay"]]
    await batcher.close()


async def test_full_queue_is_reported_as_resource_exhausted():
    enc = Encoder()
    enc.gate.clear()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=1, max_pending=2)
    await batcher.start()
    first = asyncio.create_task(batcher.submit(["x"]))       # taken by the collector, encoding
    while not enc.batches:
        await asyncio.sleep(0)
    queued = [asyncio.create_task(batcher.submit([str(i)])) for i in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(ResourceExhausted, match="queue is full"):
        await batcher.submit(["overflow"])
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *queued), timeout=5)
    await batcher.close()


async def test_close_fails_waiting_callers_with_unavailable():
    enc = Encoder()
    enc.gate.clear()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=1)
    await batcher.start()
    first = asyncio.create_task(batcher.submit(["x"]))
    while not enc.batches:
        await asyncio.sleep(0)
    waiting = asyncio.create_task(batcher.submit(["y"]))
    await asyncio.sleep(0)
    enc.gate.set()
    await batcher.close()
    await asyncio.wait_for(first, timeout=5)
    with pytest.raises(Unavailable):
        await asyncio.wait_for(waiting, timeout=5)
    with pytest.raises(Unavailable):
        await batcher.submit(["z"])



async def test_a_lone_sequential_caller_never_waits_for_company():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=30.0, max_size=64)   # a 30 s wait would blow the timeout
    await batcher.start()
    for text in ("one", "two", "three"):
        rows = await asyncio.wait_for(batcher.submit([text]), timeout=5)
        np.testing.assert_array_equal(rows, expected([text]))
    assert enc.batches == [["one"], ["two"], ["three"]]
    await batcher.close()


async def test_after_concurrent_traffic_a_new_request_waits_for_company():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=30.0, max_size=2)
    await batcher.start()
    await asyncio.wait_for(asyncio.gather(batcher.submit(["a"]), batcher.submit(["b"])), timeout=5)
    first = asyncio.create_task(batcher.submit(["c"]))
    await asyncio.sleep(0)                       # let the collector take "c" and start waiting
    second = asyncio.create_task(batcher.submit(["d"]))
    await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
    assert enc.batches == [["a", "b"], ["c", "d"]]
    await batcher.close()


# -- fairness: callers take turns, bulk ingest has its own lane ------------------------------

async def _hold_first_batch(enc: Encoder, batcher: MicroBatcher, **kw) -> asyncio.Task:
    """Submit one text and keep its batch encoding, so that everything submitted next waits."""
    enc.gate.clear()
    task = asyncio.create_task(batcher.submit(["blocker"], **kw))
    while not enc.batches:
        await asyncio.sleep(0)
    return task


async def test_a_callers_bulk_does_not_queue_ahead_of_another_callers_query():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=64)
    await batcher.start()
    blocker = await _hold_first_batch(enc, batcher, caller="mallory")
    bulk = [asyncio.create_task(batcher.submit([f"m{r}-{i}" for i in range(64)], caller="mallory"))
            for r in range(4)]                                  # 256 texts in four requests
    query = asyncio.create_task(batcher.submit(["alice's question"], caller="alice"))
    await asyncio.sleep(0)
    enc.gate.set()
    rows = await asyncio.wait_for(query, timeout=5)
    np.testing.assert_array_equal(rows, expected(["alice's question"]))
    assert "alice's question" in enc.batches[1]                 # the very next batch, shared with mallory
    assert len(enc.batches[1]) == 64 and not all(b.done() for b in bulk)
    results = await asyncio.wait_for(asyncio.gather(blocker, *bulk), timeout=5)
    for r, got in enumerate(results[1:]):
        np.testing.assert_array_equal(got, expected([f"m{r}-{i}" for i in range(64)]))
    await batcher.close()


async def test_callers_take_turns_text_by_text_and_each_request_keeps_its_order():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=4)
    await batcher.start()
    blocker = await _hold_first_batch(enc, batcher, caller="x")
    a = asyncio.create_task(batcher.submit([f"a{i}" for i in range(6)], caller="a"))
    b = asyncio.create_task(batcher.submit([f"b{i}" for i in range(6)], caller="b"))
    c = asyncio.create_task(batcher.submit(["c0"], caller="c"))
    await asyncio.sleep(0)
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(blocker, a, b, c), timeout=5)
    assert enc.batches[1:] == [["a0", "a1", "b0", "c0"], ["b1", "b2", "a2", "a3"], ["b3", "b4", "a4", "a5"],
                               ["b5"]]
    np.testing.assert_array_equal(a.result(), expected([f"a{i}" for i in range(6)]))
    np.testing.assert_array_equal(b.result(), expected([f"b{i}" for i in range(6)]))
    await batcher.close()


async def test_ingest_has_its_own_lane_and_alternates_with_searches():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=2)
    await batcher.start()
    blocker = await _hold_first_batch(enc, batcher, caller="ingest", lane="document")
    ingest = asyncio.create_task(batcher.submit([f"d{i}" for i in range(6)], caller="ingest", lane="document"))
    searches = [asyncio.create_task(batcher.submit([f"q{i}"], caller=f"user{i}")) for i in range(4)]
    await asyncio.sleep(0)
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(blocker, ingest, *searches), timeout=5)
    assert enc.batches[1:] == [["q0", "q1"], ["d0", "d1"], ["q2", "q3"], ["d2", "d3"], ["d4", "d5"]]
    assert batcher.stats.by_lane == {"query": 2, "document": 4}
    np.testing.assert_array_equal(ingest.result(), expected([f"d{i}" for i in range(6)]))
    with pytest.raises(Exception, match="lane"):
        await batcher.submit(["x"], lane="bulk")
    await batcher.close()


async def test_concurrent_callers_still_share_one_batch():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=5.0, max_size=3)
    await batcher.start()
    await asyncio.wait_for(asyncio.gather(batcher.submit(["a"], caller="u1"), batcher.submit(["b"], caller="u2"),
                                          batcher.submit(["c"], caller="u3")), timeout=5)
    assert enc.batches == [["a", "b", "c"]]
    await batcher.close()


# -- concurrent batches: the second encode function ---------------------------------------------

def two_encoders() -> tuple[Encoder, Encoder, MicroBatcher]:
    lone, concurrent = Encoder(), Encoder()
    return lone, concurrent, MicroBatcher(lone, max_wait_s=0.0, max_size=4, max_inflight=2,
                                          concurrent_encode=concurrent)


async def test_a_lone_caller_keeps_the_main_encode_even_when_its_request_spans_batches():
    lone, concurrent, batcher = two_encoders()
    await batcher.start()
    for i in range(3):                                        # sequential: never concurrent
        np.testing.assert_array_equal(await batcher.submit([f"q{i}"]), expected([f"q{i}"]))
    texts = [f"t{i}" for i in range(10)]                      # one request over 3 batches
    np.testing.assert_array_equal(await asyncio.wait_for(batcher.submit(texts), timeout=5), expected(texts))
    assert concurrent.batches == [] and batcher.stats.concurrent == 0
    assert lone.batches == [["q0"], ["q1"], ["q2"], texts[:4], texts[4:8], texts[8:]]
    await batcher.close()


async def test_concurrent_callers_go_to_the_concurrent_encode_with_their_own_rows():
    lone, concurrent, batcher = two_encoders()
    await batcher.start()
    requests = [[f"u{i}-a", f"u{i}-b"] if i % 2 else [f"u{i}"] for i in range(6)]
    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(r, caller=f"user{i}") for i, r in enumerate(requests))), timeout=5)
    for req, rows in zip(requests, results):
        np.testing.assert_array_equal(rows, expected(req))
    assert lone.batches == [] and batcher.stats.concurrent == len(concurrent.batches) >= 2
    assert sorted(t for b in concurrent.batches for t in b) == sorted(t for r in requests for t in r)
    await batcher.close()


async def test_a_batch_encoding_beside_another_is_concurrent_and_the_window_then_expires():
    lone, concurrent, batcher = two_encoders()
    await batcher.start()
    lone.gate.clear()
    first = asyncio.create_task(batcher.submit(["first"]))   # alone: main encode, held
    while not lone.batches:
        await asyncio.sleep(0)
    second = await asyncio.wait_for(batcher.submit(["second"]), timeout=5)   # beside it
    np.testing.assert_array_equal(second, expected(["second"]))
    assert concurrent.batches == [["second"]]
    lone.gate.set()
    np.testing.assert_array_equal(await asyncio.wait_for(first, timeout=5), expected(["first"]))
    await batcher.submit(["soon after"])                       # within CONCURRENCY_WINDOW_S
    assert concurrent.batches[-1] == ["soon after"]
    await asyncio.sleep(CONCURRENCY_WINDOW_S + 0.05)
    await batcher.submit(["later"])                            # quiet again: main encode
    assert lone.batches == [["first"], ["later"]] and batcher.stats.concurrent == 2
    await batcher.close()


async def test_the_query_lane_has_its_own_batch_size_and_the_document_lane_keeps_max_size():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=8, query_max_size=2)
    await batcher.start()
    blocker = await _hold_first_batch(enc, batcher, caller="ingest", lane="document")
    searches = [asyncio.create_task(batcher.submit([f"q{i}"], caller=f"user{i}")) for i in range(5)]
    ingest = asyncio.create_task(batcher.submit([f"d{i}" for i in range(8)], caller="ingest", lane="document"))
    await asyncio.sleep(0)
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(blocker, ingest, *searches), timeout=5)
    assert enc.batches[1:] == [["q0", "q1"], [f"d{i}" for i in range(8)], ["q2", "q3"], ["q4"]]
    for i, task in enumerate(searches):
        np.testing.assert_array_equal(task.result(), expected([f"q{i}"]))
    with pytest.raises(ValueError, match="query_max_size"):
        MicroBatcher(enc, max_wait_s=0.0, max_size=8, query_max_size=-1)
    await batcher.close()


async def test_batches_handed_ahead_are_formed_while_the_workers_are_busy():
    """max_inflight above the workers (LocalEmbedder `ahead`): the next batch is formed and
    handed over while the first still encodes, so a worker never waits for the collector."""
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=64, query_max_size=2, max_inflight=2)
    await batcher.start()
    first = await _hold_first_batch(enc, batcher, caller="u0")
    later = [asyncio.create_task(batcher.submit([f"q{i}"], caller=f"u{i + 1}")) for i in range(3)]
    for _ in range(50):
        await asyncio.sleep(0)
    assert enc.batches == [["blocker"], ["q0", "q1"]]        # handed over while "blocker" encodes
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *later), timeout=5)
    assert enc.batches == [["blocker"], ["q0", "q1"], ["q2"]]
    await batcher.close()


async def test_a_search_waits_behind_at_most_one_ingest_slice_and_ingest_keeps_every_other_turn():
    """`document_chars`: ingest goes to the model in slices of about that many characters, one
    handed over at a time even where the backend takes batches ahead (max_inflight 3), so a search
    arriving mid-ingest starts after at most the one slice already handed over; while searches
    keep coming, every other batch is the ingest's. The order the batches start in is asserted."""
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=64, max_inflight=3, document_chars=10)
    await batcher.start()
    enc.gate.clear()
    chunks = [f"chunk{i:02d}..." for i in range(8)]                 # 10 characters each: one a slice
    ingest = asyncio.create_task(batcher.submit(chunks, caller="ingest", lane="document"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert enc.batches == [["chunk00..."]]                         # one slice handed over, not 8
    searches = [asyncio.create_task(batcher.submit([f"q{i}"], caller=f"u{i}")) for i in range(3)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert enc.batches[1] == ["q0", "q1", "q2"]                    # at once: beside the one slice
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(ingest, *searches), timeout=5)
    assert enc.batches[2:] == [[c] for c in chunks[1:]]            # then the ingest, slice by slice
    np.testing.assert_array_equal(ingest.result(), expected(chunks))
    titles = ["a", "bb", "ccc", "dddd", "eeeee"]                    # short texts share a slice
    await batcher.submit(titles, caller="ingest", lane="document")
    assert enc.batches[-2:] == [["a", "bb", "ccc", "dddd"], ["eeeee"]]
    await batcher.submit(["aaaaaa", "bbbbbb", "cc"], caller="ingest", lane="document")
    assert enc.batches[-2:] == [["aaaaaa"], ["bbbbbb", "cc"]]      # a text that would overrun the slice waits
    await batcher.close()


async def test_while_searches_keep_coming_every_other_batch_is_an_ingest_slice():
    enc = Encoder()
    batcher = MicroBatcher(enc, max_wait_s=0.0, max_size=64, query_max_size=1, document_chars=1)
    await batcher.start()
    blocker = await _hold_first_batch(enc, batcher, caller="u")
    ingest = asyncio.create_task(batcher.submit(["d0", "d1", "d2"], caller="ingest", lane="document"))
    searches = [asyncio.create_task(batcher.submit([f"q{i}"], caller=f"u{i}")) for i in range(4)]
    await asyncio.sleep(0)
    enc.gate.set()
    await asyncio.wait_for(asyncio.gather(blocker, ingest, *searches), timeout=5)
    assert enc.batches[1:] == [["d0"], ["q0"], ["d1"], ["q1"], ["d2"], ["q2"], ["q3"]]
    await batcher.close()
