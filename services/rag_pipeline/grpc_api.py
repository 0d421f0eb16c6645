"""RAGPipeline gRPC adapter: decode, call the core, encode. No logic lives here.

With authentication on, the auth interceptor has verified the caller before a handler runs
(an end user's API key or JWT, or an operator credential) and `verified_caller()` is it; the
core applies the same access decisions as for MCP (`RagPipeline.search`). Without it (auth
off: a trusted internal network), the request's tenant_id is used as sent.
"""
from __future__ import annotations

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store import convert as ks_convert
from services.rag_pipeline import convert
from services.rag_pipeline.core import RagPipeline
from shared.grpc_errors import translate_errors
from shared.identity import verified_caller

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


class RagPipelineServicer(rag_grpc.RagPipelineServicer):
    def __init__(self, pipeline: RagPipeline) -> None:
        self._pipeline = pipeline

    @translate_errors
    async def SearchAndRank(self, request, context):
        search = convert.request_from_pb(request)
        return convert.response_to_pb(await self._pipeline.search(search, verified_caller()))

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
            request.user_id, principal=verified_caller())
        return ks_convert.feedback_ack_to_pb(ack, reputation)
