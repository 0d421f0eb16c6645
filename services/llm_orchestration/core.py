"""The LlmOrchestration core: embeddings, query expansion, re-ranking, answer synthesis.

Plain Python in, frozen dataclasses out (`results.py`); errors from `shared.errors`.
The gRPC / MCP adapters decode, call this, and encode.

    LlmOrchestrator
    ├── embed       cache → micro-batcher (a lane for queries, one for ingest; callers take turns)
    │                └── LocalEmbedder (one worker thread; ONNX Runtime or torch) | OpenAIEmbedder
    ├── expand      chat model JSON → validated alternatives   | keyword extraction (labelled)
    ├── rerank      chat model 0–10 scores                      | embedding cosine (labelled)
    │                | cross-encoder (local folder, ONNX Runtime) | remote /rerank API   (named)
    └── synthesize  chat model, cited, truncated                | extractive quotes (labelled; the units
                     │                                            also scored by a model re-ranker, unit_rerank.py)
                     └── OpenAIGateway: timeouts, tenacity retries, circuit breaker, redaction

Methods without a chat model never pretend: the `method` field says which technique ran.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import nullcontext
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from opentelemetry import trace

from ranking.profile import CROSS_ENCODER, RERANK_API
from shared.errors import INT32_MAX, check_int
from shared.errors import InvalidArgument, NucleusError, Unavailable
from shared.settings import LlmOrchestrationSettings

from . import chat as chat_mod, expansion, rerank as rerank_mod, synthesis as synth, unit_rerank
from .breaker import CircuitBreaker
from .cross_encoder import CrossEncoder
from .rerank_api import RerankApi
from .embedder import EmbeddingBackend, EmbeddingCache, LocalEmbedder, OpenAIEmbedder
from .microbatch import SPLIT_LAYOUT, BatchLayout, MicroBatcher
from .openai_client import OpenAIGateway
from .results import Citation, EmbeddingResult, Expansion, RerankResult, Synthesis

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
EMBEDDING_PURPOSES = ("query", "document")

# Input checks of the operations: each failure names the field.


def check_text(field: str, text: object, *, max_chars: int) -> str:
    """One non-empty, valid-UTF-8 string of at most `max_chars` characters."""
    if not isinstance(text, str):
        raise InvalidArgument(field, f"expected a string, got {type(text).__name__}")
    if not text.strip():
        raise InvalidArgument(field, "empty text")
    if len(text) > max_chars:
        raise InvalidArgument(field, f"{len(text)} characters; at most {max_chars} are accepted")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:   # lone surrogates smuggled in through a str
        raise InvalidArgument(field, "not valid UTF-8") from None
    return text


def check_texts(texts: Sequence[str], *, max_count: int, max_chars: int,
                field: str = "texts") -> list[str]:
    """A non-empty batch of at most `max_count` texts, each passing `check_text`."""
    if isinstance(texts, (str, bytes)):
        raise InvalidArgument(field, "expected a list of strings, got a single string")
    texts = list(texts)
    if not texts:
        raise InvalidArgument(field, "at least one text is required")
    if len(texts) > max_count:
        raise InvalidArgument(field, f"{len(texts)} texts; at most {max_count} per request")
    for i, text in enumerate(texts):
        check_text(f"{field}[{i}]", text, max_chars=max_chars)
    return texts


def check_purpose(purpose: str) -> str:
    """"query" (the default, also for "") or "document"."""
    purpose = purpose or "query"
    if purpose not in EMBEDDING_PURPOSES:
        raise InvalidArgument("purpose", f"{purpose!r} is not one of {', '.join(EMBEDDING_PURPOSES)}")
    return purpose


def check_ids(field: str, ids: Sequence[str]) -> None:
    """Ids are non-empty and unique (they are how answers refer back to inputs)."""
    seen: set[str] = set()
    for i, item_id in enumerate(ids):
        if not isinstance(item_id, str) or not item_id.strip():
            raise InvalidArgument(f"{field}[{i}].id", "empty id")
        if item_id in seen:
            raise InvalidArgument(f"{field}[{i}].id", f"duplicate id {item_id!r}; ids must be unique")
        seen.add(item_id)


def check_settings(settings: LlmOrchestrationSettings) -> None:
    """Reject a configuration that cannot work, before anything is loaded."""
    needs_endpoint = settings.embedding_provider == "openai" or bool(settings.chat_model)
    if needs_endpoint and not settings.openai_base_url:
        raise InvalidArgument("openai_base_url", "required when embedding_provider is 'openai' or "
                              "chat_model is set (e.g. https://api.openai.com/v1)")
    if any(any(c.isspace() for c in m) for m in chat_mod.allowed_chat_models("", settings.chat_models_allowed)):
        raise InvalidArgument("chat_models_allowed", "comma-separated model names without spaces")
    positive = {"max_texts_per_request": settings.max_texts_per_request,
                "max_embed_texts": settings.max_embed_texts,
                "max_text_chars": settings.max_text_chars,
                "encode_batch_size": settings.encode_batch_size,
                "max_attempts": settings.max_attempts,
                "breaker_failure_threshold": settings.breaker_failure_threshold,
                "request_timeout_s": settings.request_timeout_s,
                "cross_encoder_batch_size": settings.cross_encoder_batch_size,
                "rerank_api_timeout_s": settings.rerank_api_timeout_s}
    for name, value in positive.items():
        if value <= 0:
            raise InvalidArgument(name, f"must be positive, got {value}")
    for name, value in {"cache_size": settings.cache_size, "breaker_reset_s": settings.breaker_reset_s}.items():
        if value < 0:
            raise InvalidArgument(name, f"must be >= 0, got {value}")
    unit_rerank.check_settings(settings.synthesis_reranker, settings.synthesis_rerank_weight,
                               cross_encoder=bool(settings.cross_encoder_path),
                               rerank_api=bool(settings.rerank_api_url))


class LlmOrchestrator:
    """One per process. `start()` loads the model; every operation is a coroutine."""

    def __init__(self, settings: LlmOrchestrationSettings, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 torch_threads: int = 0, layout: BatchLayout = SPLIT_LAYOUT) -> None:
        """`clock` drives the circuit breaker and `sleep` the retry waits (tests inject both);
        `torch_threads=0` means one per available CPU; `layout`: the micro-batcher's and the local
        model's (`nucleus up --mode single` passes SINGLE_LAYOUT)."""
        check_settings(settings)
        self._settings = settings
        self._breaker = CircuitBreaker(failure_threshold=settings.breaker_failure_threshold,
                                       reset_s=settings.breaker_reset_s,
                                       name="OpenAI-compatible endpoint", clock=clock)
        self._gateway: OpenAIGateway | None = None
        if settings.openai_base_url and (settings.chat_model or
                                         settings.embedding_provider == "openai"):
            self._gateway = OpenAIGateway(settings, breaker=self._breaker, sleep=sleep)
        self._backend: EmbeddingBackend
        if settings.embedding_provider == "openai":
            assert self._gateway is not None
            self._backend = OpenAIEmbedder(self._gateway, model=settings.openai_embedding_model,
                                           dimension=settings.openai_embedding_dimension,
                                           chunk_size=settings.encode_batch_size)
        else:
            self._backend = LocalEmbedder(settings.local_model_path,
                                          batch_size=settings.encode_batch_size,
                                          torch_threads=torch_threads,
                                          runtime=settings.local_runtime,
                                          onnx_cache_dir=settings.onnx_cache_dir,
                                          concurrent_threads=layout.concurrent_threads,
                                          concurrent_workers=layout.concurrent_workers,
                                          ahead=layout.ahead)
        self._cross_encoder: CrossEncoder | None = None
        if settings.cross_encoder_path:
            self._cross_encoder = CrossEncoder(settings.cross_encoder_path,
                                               max_length=settings.cross_encoder_max_length,
                                               batch_size=settings.cross_encoder_batch_size,
                                               onnx_cache_dir=settings.onnx_cache_dir,
                                               runtime=settings.local_runtime)
        self._rerank_api: RerankApi | None = None
        if settings.rerank_api_url:
            self._rerank_api = RerankApi(
                settings.rerank_api_url, api_key=settings.rerank_api_key.get_secret_value(),
                model=settings.rerank_api_model, api_format=settings.rerank_api_format,
                timeout_s=settings.rerank_api_timeout_s, max_attempts=settings.max_attempts,
                breaker=CircuitBreaker(failure_threshold=settings.breaker_failure_threshold,
                                       reset_s=settings.breaker_reset_s, name="rerank API", clock=clock),
                sleep=sleep)
        self._cache = EmbeddingCache(settings.cache_size)
        self._batcher = MicroBatcher(self._backend.encode,
                                     max_wait_s=layout.max_wait_ms / 1000.0,
                                     max_size=layout.max_size,
                                     query_max_size=layout.query_max_size,
                                     document_chars=getattr(self._backend, "document_chars", 0),
                                     max_inflight=self._backend.max_inflight,
                                     concurrent_encode=getattr(self._backend, "encode_concurrent", None))
        self._started = False
        self.tracer_provider: trace.TracerProvider | None = None   # None = the global one (tests set their own)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the embedding model (in its worker thread) and start the micro-batcher."""
        if self._started:
            return
        await self._backend.start()
        if self._cross_encoder is not None:
            await asyncio.to_thread(self._cross_encoder.load)
        await self._batcher.start()
        self._started = True
        log.info("LlmOrchestration ready: embeddings %s/%s (dimension %d, runtime %s), "
                 "chat model %s", self.provider, self.embedding_model, self.dimension,
                 self._backend.runtime,
                 self._settings.chat_model if self.chat_configured else "none")

    async def close(self) -> None:
        self._started = False
        await self._batcher.close()
        await self._backend.close()
        if self._gateway is not None:
            await self._gateway.close()
        if self._rerank_api is not None:
            await self._rerank_api.close()

    def _spans(self) -> trace.Tracer:
        """The tracer of `tracer_provider` when one is set (tests), else the global one."""
        return self.tracer_provider.get_tracer(__name__) if self.tracer_provider is not None else _tracer

    # -- introspection ---------------------------------------------------------------------

    @property
    def embedding_model(self) -> str:
        return self._backend.model_name

    @property
    def dimension(self) -> int:
        """Embedding dimension; 0 for an OpenAI backend whose dimension is not known yet."""
        return self._backend.dimension

    @property
    def provider(self) -> str:
        return self._backend.provider

    @property
    def chat_configured(self) -> bool:
        return bool(self._settings.chat_model and self._gateway is not None)

    @property
    def chat_models(self) -> tuple[str, ...]:
        """The models a chat completion may ask for (the operator's allow-list and the chat model)."""
        return chat_mod.allowed_chat_models(self._settings.chat_model, self._settings.chat_models_allowed)

    @property
    def cache(self) -> EmbeddingCache:
        return self._cache

    @property
    def batcher(self) -> MicroBatcher:
        return self._batcher

    def info(self) -> dict[str, Any]:
        return {
            "embedding_model": self.embedding_model,
            "dimension": self.dimension,
            "provider": self.provider,
            "runtime": self._backend.runtime,
            "chat_configured": self.chat_configured,
            "chat_model": self._settings.chat_model if self.chat_configured else "",
            "breaker_state": self._breaker.state,
            "rerankers": self.rerankers,
        }

    @property
    def synthesis_reranker(self) -> str:
        """The model re-ranker the extractive answer scores its units with ("" = none;
        `NUCLEUS_LLM_SYNTHESIS_RERANKER`, unit_rerank.py)."""
        s = self._settings
        return unit_rerank.choose(s.synthesis_reranker, s.synthesis_rerank_weight,
                                  cross_encoder=self._cross_encoder is not None,
                                  rerank_api=self._rerank_api is not None)

    @property
    def rerankers(self) -> list[str]:
        """The re-rank methods a request may name: the default one, then the configured models."""
        names = ["llm" if self.chat_configured else "embedding-cosine"]
        if self._cross_encoder is not None:
            names.append(CROSS_ENCODER)
        if self._rerank_api is not None:
            names.append(RERANK_API)
        return names

    # -- embeddings ------------------------------------------------------------------------

    async def embed(self, texts: Sequence[str], purpose: str = "query", *, caller: str = "",
                    span: trace.Span | None = None) -> EmbeddingResult:
        """L2-normalised float32 (len(texts), dimension) vectors, in input order.

        At most `max_embed_texts` texts per call. Cached rows are reused (and counted in
        `cache_hits`); the rest are de-duplicated and encoded through the micro-batcher, in the
        lane of their purpose ("document" = bulk ingest) and taking turns with other callers
        (`caller`: the end user the call is made for, "" = unknown). Only `purpose="query"`
        results are added to the cache. `span`: the caller's span of this embedding (the GenAI
        one of GenerateEmbeddings, front.py), which then carries the `llm.embed.*` attributes;
        without one the call makes its own `llm.embed` span.
        """
        return await self._embed(texts, purpose, caller, max_count=self._settings.max_embed_texts, span=span)

    async def _embed(self, texts: Sequence[str], purpose: str, caller: str, *, max_count: int,
                     span: trace.Span | None = None) -> EmbeddingResult:
        """`embed` with another bound on the count (re-ranking and extraction embed their own
        candidates, bounded by `max_texts_per_request`)."""
        s = self._settings
        texts = check_texts(texts, max_count=max_count, max_chars=s.max_text_chars)
        purpose = check_purpose(purpose)
        if not self._started:
            raise Unavailable("LlmOrchestration is not started (model not loaded)")
        with (nullcontext(span) if span is not None else _tracer.start_as_current_span("llm.embed")) as span:
            span.set_attribute("llm.embed.count", len(texts))
            span.set_attribute("llm.embed.purpose", purpose)
            cached = self._cache.get_many(texts)
            hits = sum(row is not None for row in cached)
            missing = list(dict.fromkeys(t for t, row in zip(texts, cached) if row is None))
            fresh: dict[str, np.ndarray] = {}
            if missing:
                vectors = await self._batcher.submit(missing, caller=caller, lane=purpose)
                fresh = dict(zip(missing, vectors))
                if purpose == "query":
                    self._cache.put_many(missing, vectors)
            dimension = next(iter(fresh.values())).shape[0] if fresh else cached[0].shape[0]
            out = np.empty((len(texts), dimension), dtype=np.float32)
            for i, (text, row) in enumerate(zip(texts, cached)):
                out[i] = row if row is not None else fresh[text]
            out.flags.writeable = False
            span.set_attribute("llm.embed.cache_hits", hits)
            return EmbeddingResult(vectors=out, model=self.embedding_model,
                                   provider=self.provider, dimension=dimension, cache_hits=hits)

    # -- expansion -------------------------------------------------------------------------

    async def expand(self, query: str, max_alternatives: int = expansion.DEFAULT_ALTERNATIVES
                     ) -> Expansion:
        """phrases[0] is `query` unchanged; then LLM alternatives, or one keyword phrase.

        `max_alternatives` 1–4 (0 = the default, 3). Best-effort: chat model failures fall
        back to keyword extraction with a note; only invalid input raises.
        """
        query = check_text("query", query, max_chars=self._settings.max_text_chars)
        if max_alternatives == 0:
            max_alternatives = expansion.DEFAULT_ALTERNATIVES
        if not 1 <= max_alternatives <= expansion.MAX_ALTERNATIVES:
            raise InvalidArgument("max_alternatives", f"{max_alternatives} is out of range; "
                                  f"1 to {expansion.MAX_ALTERNATIVES} are accepted (0 = default)")
        with _tracer.start_as_current_span("llm.expand") as span:
            if not self.chat_configured:
                result = self._keyword_expansion(query, expansion.NOTE_NO_CHAT)
            else:
                result = await self._llm_expansion(query, max_alternatives)
            span.set_attribute("llm.expand.method", result.method)
            span.set_attribute("llm.expand.phrases", len(result.phrases))
            return result

    async def _llm_expansion(self, query: str, max_alternatives: int) -> Expansion:
        assert self._gateway is not None
        try:
            content = await self._gateway.chat(
                expansion.expansion_messages(query, max_alternatives), json_mode=True,
                task="query expansion")
            alternatives = expansion.clean_alternatives(
                query, expansion.parse_alternatives(content), max_alternatives)
        except NucleusError as err:
            reason = self._gateway.redactor.redact(f"{err.kind}: {err}")
            log.warning("query expansion fell back to keywords: %s", reason)
            return self._keyword_expansion(query, f"chat model failed ({reason})")
        if not alternatives:
            return self._keyword_expansion(query, "chat model returned no usable alternatives")
        return Expansion(phrases=(query, *alternatives), method="llm",
                         note=f"{len(alternatives)} alternative phrasing(s) from the chat model",
                         model=self._settings.chat_model)

    @staticmethod
    def _keyword_expansion(query: str, why: str) -> Expansion:
        phrase = expansion.keyword_phrase(query)
        if phrase is None:
            return Expansion(phrases=(query,), method="unavailable", model="",
                             note=f"{why}; {expansion.NOTE_KEYWORDS} found no distinct "
                                  "keyword phrase")
        return Expansion(phrases=(query, phrase), method="keywords", model="",
                         note=f"{why}; {expansion.NOTE_KEYWORDS}")

    # -- rerank ----------------------------------------------------------------------------

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], method: str = "") -> RerankResult:
        """Scores in [0, 1] for (id, text) candidates, same order.

        `method` "" = the default: with a chat model, LLM judgement; without, "embedding-cosine"
        (labelled as such). "cross-encoder" / "rerank-api": the configured model re-ranker
        (`rerankers` lists what is configured; another name is InvalidArgument naming it).
        Model errors raise (Unavailable / ResourceExhausted / DeadlineExceeded /
        UpstreamFailed) — the caller decides whether to degrade.
        """
        s = self._settings
        query = check_text("query", query, max_chars=s.max_text_chars)
        candidates = [(cid, text) for cid, text in candidates]
        if not candidates:
            raise InvalidArgument("candidates", "at least one candidate is required")
        if len(candidates) > s.max_texts_per_request:
            raise InvalidArgument("candidates", f"{len(candidates)} candidates; at most "
                                  f"{s.max_texts_per_request} per request")
        check_ids("candidates", [cid for cid, _ in candidates])
        for i, (_cid, text) in enumerate(candidates):
            check_text(f"candidates[{i}].text", text, max_chars=s.max_text_chars)
        if method and method not in self.rerankers:
            raise InvalidArgument("method", f"{method!r} is not a configured re-ranker; accepted: "
                                  f"'' (default), {', '.join(repr(m) for m in self.rerankers)}")
        with self._spans().start_as_current_span("llm.rerank") as span:
            span.set_attribute("llm.rerank.count", len(candidates))
            texts = [t for _, t in candidates]
            if method == CROSS_ENCODER:
                assert self._cross_encoder is not None
                if not self._started:
                    raise Unavailable("LlmOrchestration is not started (model not loaded)")
                scores = await self._cross_encoder.score(query, texts)
                span.set_attribute("llm.rerank.truncated", self._cross_encoder.last_truncated)
                result = RerankResult(tuple(float(x) for x in scores), self._cross_encoder.model_name,
                                      CROSS_ENCODER)
            elif method == RERANK_API:
                assert self._rerank_api is not None
                scores = await self._rerank_api.score(query, texts)
                result = RerankResult(tuple(float(x) for x in scores), self._rerank_api.model or "rerank-api",
                                      RERANK_API)
            elif method in ("llm", "") and self.chat_configured:
                scores_llm = await self._llm_scores(query, candidates)
                result = RerankResult(tuple(scores_llm), self._settings.chat_model, "llm")
            else:
                vectors = await self._embed_for_similarity(query, texts)
                unit = rerank_mod.cosine_to_unit(vectors[0], vectors[1:])
                result = RerankResult(tuple(float(x) for x in unit), self.embedding_model,
                                      "embedding-cosine")
            span.set_attribute("llm.rerank.method", result.method)
            return result

    async def _llm_scores(self, query: str, candidates: list[tuple[str, str]]) -> list[float]:
        assert self._gateway is not None
        gateway = self._gateway
        groups = [candidates[i:i + rerank_mod.LLM_GROUP_SIZE]
                  for i in range(0, len(candidates), rerank_mod.LLM_GROUP_SIZE)]

        async def score(group: list[tuple[str, str]]) -> list[float]:
            content = await gateway.chat(rerank_mod.rerank_messages(query, group),
                                         json_mode=True, task="rerank")
            return rerank_mod.parse_scores(content, [cid for cid, _ in group])

        if len(groups) == 1:
            return await score(groups[0])
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(score(group)) for group in groups]
        return [x for task in tasks for x in task.result()]

    async def _embed_for_similarity(self, query: str, texts: list[str]) -> np.ndarray:
        """Row 0: the query (cached as a query); rows 1..: `texts` (not cached)."""
        q = await self.embed([query], purpose="query")
        docs = await self._embed(texts, "document", "", max_count=self._settings.max_texts_per_request)
        return np.concatenate([q.vectors, docs.vectors], axis=0)

    # -- chat completions ------------------------------------------------------------------

    async def chat_completion(self, request: chat_mod.ChatRequest) -> AsyncIterator[chat_mod.ChatChunk]:
        """The configured chat model's reply, streamed: text pieces and tool-call pieces, then a
        last chunk (`done`) with the finish reason and the usage. Through the OpenAI-compatible
        client (timeouts, retries before the first token, circuit breaker, redaction); a GenAI
        "chat" span records model, tokens and finish reason — message text only with content
        capture on. No chat model configured: Unavailable."""
        chat_mod.check_request(request, max_text_chars=self._settings.max_text_chars)
        if not self.chat_configured:
            raise Unavailable("no chat model is configured (NUCLEUS_LLM_OPENAI_BASE_URL and NUCLEUS_LLM_CHAT_MODEL)")
        assert self._gateway is not None
        model = chat_mod.chat_model_for(request, self._settings.chat_model, self.chat_models)
        text: list[str] = []
        with chat_mod.chat_span(model, request, tracer_provider=self.tracer_provider) as span:
            async for delta in self._gateway.chat_stream(
                    chat_mod.wire_messages(request.messages), model=model,
                    tools=chat_mod.wire_tools(request.tools) or None,
                    tool_choice=chat_mod.wire_tool_choice(request.tool_choice) if request.tools else None,
                    max_tokens=request.max_tokens, task="chat completion"):
                chunk = chat_mod.ChatChunk(
                    content=delta.content, tool_calls=tuple(chat_mod.ToolCall(*c) for c in delta.tool_calls),
                    model=delta.model, finish_reason=delta.finish_reason, input_tokens=delta.input_tokens,
                    output_tokens=delta.output_tokens, done=delta.done)
                text.append(delta.content)
                if chunk.done:
                    chat_mod.end_chat_span(span, chunk, "".join(text))
                yield chunk

    # -- synthesis -------------------------------------------------------------------------

    async def synthesize(self, query: str, passages: Sequence[tuple[str, str, str]],
                         max_chars: int = 0, style: str = "concise") -> Synthesis:
        """An answer to `query` from (id, title, text) passages, citing passage ids.

        `max_chars` 0 = 2000. `style`: "concise" (also for "") | "detailed" | "bullets".
        With a chat model: grounded generation (errors raise). Without: "extractive".
        """
        s = self._settings
        query = check_text("query", query, max_chars=s.max_text_chars)
        passages = [(pid, title or "", text) for pid, title, text in passages]
        if not passages:
            raise InvalidArgument("passages", "at least one passage is required")
        if len(passages) > s.max_texts_per_request:
            raise InvalidArgument("passages", f"{len(passages)} passages; at most "
                                  f"{s.max_texts_per_request} per request")
        check_ids("passages", [pid for pid, _, _ in passages])
        for i, (_pid, _title, text) in enumerate(passages):
            check_text(f"passages[{i}].text", text, max_chars=s.max_text_chars)
        if max_chars < 0:
            raise InvalidArgument("max_chars", f"{max_chars} is negative; 0 (default "
                                  f"{synth.DEFAULT_MAX_CHARS}) or a positive limit is accepted")
        check_int("max_chars", max_chars, 0, INT32_MAX)
        max_chars = max_chars or synth.DEFAULT_MAX_CHARS
        style = style or "concise"
        if style not in synth.STYLES:
            raise InvalidArgument("style", f"{style!r} is not one of {', '.join(synth.STYLES)}")
        with self._spans().start_as_current_span("llm.synthesize") as span:
            span.set_attribute("llm.synthesize.passages", len(passages))
            if self.chat_configured:
                result = await self._llm_synthesis(query, passages, max_chars, style)
            else:
                result = await self._extractive_synthesis(query, passages, max_chars, style)
            span.set_attribute("llm.synthesize.method", result.method)
            span.set_attribute("llm.synthesize.truncated", result.truncated)
            return result

    async def _llm_synthesis(self, query: str, passages: list[tuple[str, str, str]],
                             max_chars: int, style: str) -> Synthesis:
        assert self._gateway is not None
        fitted = synth.fit_passages(passages)
        reasons: list[str] = []
        if fitted.dropped or fitted.clipped:
            reasons.append(
                f"prompt budget of {synth.PROMPT_BUDGET_CHARS} passage characters: "
                f"used {len(fitted.passages)} of {len(passages)} passages"
                + (" (the first one clipped)" if fitted.clipped else ""))
        content = await self._gateway.chat(
            synth.synthesis_messages(query, fitted.passages, style, max_chars),
            json_mode=False, task="synthesis")
        answer, cut = synth.truncate_text(content, max_chars)
        if cut:
            reasons.append(f"answer cut to max_chars={max_chars}")
        ids = synth.cited_ids(answer, [pid for pid, _, _ in fitted.passages])
        return Synthesis(answer=answer, citations=synth.citations_for(ids, passages),
                         truncated=bool(reasons), truncation_reason="; ".join(reasons),
                         model=self._settings.chat_model, method="llm")

    async def _extractive_synthesis(self, query: str, passages: list[tuple[str, str, str]],
                                    max_chars: int, style: str) -> Synthesis:
        """No chat model: the passages' sentences, table rows and list items (synthesis.py),
        scored against the query by the embedding model (the query and every unit embedded in
        one batched call) and BM25 — and by the configured model re-ranker, blended in
        (unit_rerank.py) — the best few quoted in reading order with citations. A failing
        re-ranker leaves today's scores, and the answer says so (`degraded_reasons`)."""
        units = synth.answer_units(passages)
        vectors = (await self._embed([query, *(u.context for u in units)], "document", "",
                                     max_count=self._settings.max_texts_per_request + 1)).vectors
        today = synth.unit_scores(query, units, (vectors[1:] @ vectors[0]).astype(np.float32))
        scored = await self.score_units(query, units, today)
        span = trace.get_current_span()
        span.set_attribute("llm.synthesize.unit_scorer", scored.scorer)
        span.set_attribute("llm.synthesize.units_scored", len(units))
        span.set_attribute("llm.synthesize.degraded", bool(scored.degraded_reason))
        extract = synth.extract_answer(units, scored.scores, max_chars=max_chars, style=style)
        return Synthesis(answer=extract.answer,
                         citations=synth.citations_for(extract.passage_ids, passages),
                         truncated=extract.truncated,
                         truncation_reason=(f"answer limited to max_chars={max_chars}"
                                            if extract.truncated else ""),
                         model=(f"{self.embedding_model} + {scored.model_name}" if scored.reranker
                                else self.embedding_model),
                         method=unit_rerank.method_name(scored.reranker),
                         degraded=bool(scored.degraded_reason),
                         degraded_reasons=(scored.degraded_reason,) if scored.degraded_reason else ())

    async def score_units(self, query: str, units: Sequence[synth.Unit], today: np.ndarray) -> unit_rerank.UnitScores:
        """`today`'s unit scores blended with the configured re-ranker's (unit_rerank.py): the
        (query, unit context) pairs in one `rerank` call, as candidates are scored. Any failure
        of the re-ranker (API errors, breaker open, model error) keeps `today`, with a reason."""
        method = self.synthesis_reranker
        if not method or not units:
            return unit_rerank.UnitScores.without_model(today)
        try:
            result = await self.rerank(query, [(f"u{i}", u.context) for i, u in enumerate(units)], method)
        except Exception as err:  # noqa: BLE001 - every failure of the model degrades to today's scoring, said so
            reason = unit_rerank.failure_reason(method, err)
            log.warning("extractive answer without its re-ranker: %s", reason,
                        exc_info=not isinstance(err, NucleusError))
            return unit_rerank.UnitScores.without_model(today, reason)
        model = np.asarray(result.scores, dtype=np.float32)
        return unit_rerank.UnitScores(unit_rerank.blend(today, model, self._settings.synthesis_rerank_weight),
                                      today, model, method, result.model, "")


__all__ = ["LlmOrchestrator", "check_settings", "Citation", "EmbeddingResult", "Expansion",
           "RerankResult", "Synthesis"]
