"""RAGPipeline gRPC adapter: decode, call the core, encode. No logic lives here.

With authentication on, the auth interceptor has verified the caller before a handler runs
(an end user's API key or JWT, or an operator credential) and `verified_caller()` is it; the
core applies the same access decisions as for MCP (`RagPipeline.search`). Without it (auth
off: a trusted internal network), the request's tenant_id is used as sent — unless a
SearchAndRank carries `x-nucleus-principal: local` (`nucleus search` without `--as-operator`):
then it is answered as the local principal, exactly as MCP answers such a caller.
SearchAndRank's initial metadata `x-nucleus-answered-as` says who it was answered as.
"""
from __future__ import annotations

import json

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store import convert as ks_convert
from services.rag_pipeline import convert, personas
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.pages import Pages
from services.rag_pipeline.topics import TopicTools
from services.rag_pipeline.why_not import why_not
from services.llm_orchestration import convert as llm_convert
from services.rag_pipeline.chat import ChatGate
from shared.errors import Unavailable
from shared.grpc_errors import translate_errors
from shared.identity import (
    ANSWERED_AS_METADATA,
    LOCAL_PRINCIPAL_METADATA,
    Principal,
    describe_principal,
    local_principal,
    verified_caller,
)

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


def _metadata(context) -> set[tuple[str, str]]:
    return {(k.lower(), v) for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _ascii(text: str) -> str:
    """gRPC metadata values are ASCII."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


async def _answered_as(context, tenant_id: str) -> Principal | None:
    """The verified caller; unverified and asking for the local principal, as MCP answers one, of the
    tenant named. Sent back as the `answered as` metadata before the answer."""
    caller = verified_caller()
    if caller is None and LOCAL_PRINCIPAL_METADATA in _metadata(context):
        caller = local_principal(tenant_id)
    await context.send_initial_metadata(((ANSWERED_AS_METADATA, _ascii(describe_principal(caller))),))
    return caller


class RagPipelineServicer(rag_grpc.RagPipelineServicer):
    def __init__(self, pipeline: RagPipeline, topic_tools: TopicTools | None = None,
                 chat: ChatGate | None = None, pages: Pages | None = None) -> None:
        self._pipeline = pipeline
        self._pages = pages or Pages(pipeline)      # MCP's, to share its held rankings and cursor key
        self._topics = topic_tools
        self._chat = chat

    @translate_errors
    async def Chat(self, request, context):
        """The verified caller's chat completion, streamed (services/rag_pipeline/chat.py)."""
        if self._chat is None:
            raise Unavailable("chat is not served by this process")
        async for chunk in self._chat.chat(llm_convert.chat_request_from_pb(request.completion),
                                           verified_caller(), persona_id=request.persona_id):
            yield llm_convert.chat_chunk_to_pb(chunk)

    @property
    def _knowledge(self):
        """The KnowledgeStore port (personas are stored there)."""
        if self._topics is None:
            raise Unavailable("personas are not served by this process")
        return self._topics.ks

    @translate_errors
    async def SearchAndRank(self, request, context):
        search = convert.request_from_pb(request)
        caller = await _answered_as(context, search.tenant_id)
        page = await self._pages.search(search, caller, cursor=request.cursor)
        answer = convert.response_to_pb(page.response)
        answer.next_cursor = page.cursor_after(len(page.response.results)) or ""
        return answer

    @translate_errors
    async def WhyNot(self, request, context):
        search = convert.request_from_pb(request.search) if request.HasField("search") else None
        caller = await _answered_as(context, search.tenant_id if search else "")
        answer = await why_not(self._pipeline, self._pages, search if search and search.query else None, caller,
                               tuple(request.artifact_ids), request.search_id)
        return rag_pb.WhyNotResponse(result_json=answer.model_dump_json())

    @translate_errors
    async def PutRankingProfile(self, request, context):
        profile = ks_convert.profile_from_pb(request)
        return ks_convert.profile_to_pb(await self._pipeline.put_profile(profile, verified_caller()))

    @translate_errors
    async def GetRankingProfile(self, request, context):
        tenant = self._pipeline.tenant_for(request.tenant_id, verified_caller())
        profile = await self._pipeline.get_profile(tenant, request.persona_id, request.name, request.version)
        return ks_convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        tenant = self._pipeline.tenant_for(request.tenant_id, verified_caller())
        profiles = await self._pipeline.list_profiles(tenant, request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[ks_convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def RecordFeedback(self, request, context):
        ack, reputation = await self._pipeline.record_feedback(
            request.tenant_id, _TARGETS.get(request.target, ""), request.target_id, request.helpful,
            request.user_id, principal=verified_caller(), search_id=request.search_id)
        return ks_convert.feedback_ack_to_pb(ack, reputation)

    @translate_errors
    async def RunTopicTool(self, request, context):
        if self._topics is None:
            raise Unavailable("the topic tools are not served by this process")
        answer = await self._topics.run(
            verified_caller(), request.tool, tenant_id=request.tenant_id, k=request.k,
            max_terms=request.max_terms or 8, examples=request.examples if request.examples >= 0 else 0,
            period=request.period or "month", date_field=request.date_field or "created",
            topic_id=request.topic_id if request.HasField("topic_id") else None, query=request.query,
            limit=request.limit or 8, max_points=request.max_points or 2_000, include_png=request.include_png)
        return rag_pb.TopicToolResponse(status=answer.get("status", "ready"),
                                        progress=float(answer.get("progress", 1.0)),
                                        result_json=json.dumps(answer, separators=(",", ":")))

    @translate_errors
    async def PutPersona(self, request, context):
        stored = await personas.put_persona(self._pipeline, self._knowledge, ks_convert.persona_from_pb(request),
                                            verified_caller())
        return ks_convert.persona_to_pb(stored)

    @translate_errors
    async def GetPersona(self, request, context):
        return ks_convert.persona_to_pb(await personas.get_persona(self._pipeline, self._knowledge,
                                                            request.tenant_id, request.persona_id, verified_caller()))

    @translate_errors
    async def ListPersonas(self, request, context):
        found = await personas.list_personas(self._pipeline, self._knowledge, request.tenant_id,
                                             verified_caller())
        return pb.ListPersonasResponse(personas=[ks_convert.persona_to_pb(p) for p in found])
