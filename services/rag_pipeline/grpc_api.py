"""RAGPipeline gRPC adapter: decode, call the core, encode. No logic lives here."""
from __future__ import annotations

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store import convert as ks_convert
from services.rag_pipeline import convert
from services.rag_pipeline.core import RagPipeline
from shared.grpc_errors import translate_errors

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


class RagPipelineServicer(rag_grpc.RagPipelineServicer):
    def __init__(self, pipeline: RagPipeline) -> None:
        self._pipeline = pipeline

    @translate_errors
    async def SearchAndRank(self, request, context):
        response = await self._pipeline.search_and_rank(convert.request_from_pb(request))
        return convert.response_to_pb(response)

    @translate_errors
    async def PutRankingProfile(self, request, context):
        stored = await self._pipeline.put_profile(ks_convert.profile_from_pb(request))
        return ks_convert.profile_to_pb(stored)

    @translate_errors
    async def GetRankingProfile(self, request, context):
        profile = await self._pipeline.get_profile(request.tenant_id, request.persona_id, request.name, request.version)
        return ks_convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        profiles = await self._pipeline.list_profiles(request.tenant_id, request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[ks_convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def RecordFeedback(self, request, context):
        ack, reputation = await self._pipeline.record_feedback(
            request.tenant_id, _TARGETS.get(request.target, ""), request.target_id, request.helpful, request.user_id)
        return ks_convert.feedback_ack_to_pb(ack, reputation)
