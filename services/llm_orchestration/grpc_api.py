"""LlmOrchestration gRPC adapter: decode, call the core, encode. No logic lives here.

With authentication on, the verified caller (an on-behalf-of assertion names the end user)
decides whose turn an embedding request takes in the micro-batcher's fair queue."""
from __future__ import annotations

from nucleus.v1 import llm_orchestration_pb2_grpc as llm_grpc
from services.llm_orchestration import convert
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.front import embeddings
from shared.errors import NucleusError
from shared.grpc_errors import abort_for, translate_errors
from shared.identity import verified_caller


class LlmOrchestrationServicer(llm_grpc.LlmOrchestrationServicer):
    def __init__(self, core: LlmOrchestrator) -> None:
        self._core = core

    @translate_errors
    async def GenerateEmbeddings(self, request, context):
        # the GenAI "embeddings" span; fair turns per end user (front.py)
        return convert.embeddings_to_pb(await embeddings(self._core, verified_caller(), request.texts,
                                                         request.purpose))

    @translate_errors
    async def ExpandOrRephraseQuery(self, request, context):
        return convert.expansion_to_pb(await self._core.expand(request.query, request.max_alternatives or 3))

    @translate_errors
    async def Rerank(self, request, context):
        candidates = [(c.id, c.text) for c in request.candidates]
        result = await self._core.rerank(request.query, candidates, request.method)
        return convert.rerank_to_pb([c[0] for c in candidates], result)

    @translate_errors
    async def Synthesize(self, request, context):
        passages = [(p.id, p.title, p.text) for p in request.passages]
        return convert.synthesis_to_pb(await self._core.synthesize(
            request.query, passages, max_chars=request.max_chars, style=request.style or "concise"))

    async def GenerateChatCompletion(self, request, context):
        """Streams the reply's chunks; errors before or during the stream end it with their status."""
        try:
            async for chunk in self._core.chat_completion(convert.chat_request_from_pb(request)):
                yield convert.chat_chunk_to_pb(chunk)
        except NucleusError as err:
            await abort_for(context, err)

    @translate_errors
    async def GetModelInfo(self, request, context):
        return convert.info_to_pb(self._core.info())
