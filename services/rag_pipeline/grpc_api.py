"""RAGPipeline gRPC adapter: decode, call the core, encode. No logic lives here.

`identity` resolves the caller from the call's metadata (a bearer token, verified like MCP's)
when the service requires authentication; the core then scopes the request to that principal.
Without it (auth off: a trusted internal network), the request's tenant_id is used as sent.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store import convert as ks_convert
from services.rag_pipeline import convert
from services.rag_pipeline.core import RagPipeline
from shared.grpc_errors import translate_errors
from shared.identity import Principal

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}
Identity = Callable[[Mapping[str, str]], Principal]


class RagPipelineServicer(rag_grpc.RagPipelineServicer):
    def __init__(self, pipeline: RagPipeline, identity: Identity | None = None) -> None:
        self._pipeline = pipeline
        self._identity = identity

    def _caller(self, context) -> Principal | None:
        if self._identity is None:
            return None
        return self._identity({k.lower(): v for k, v in (context.invocation_metadata() or ())})

    @translate_errors
    async def SearchAndRank(self, request, context):
        search = convert.request_from_pb(request)
        principal = self._caller(context)
        if principal is not None:
            search = self._pipeline.scope_to(search, principal)
        return convert.response_to_pb(await self._pipeline.search_and_rank(search))

    @translate_errors
    async def PutRankingProfile(self, request, context):
        profile = ks_convert.profile_from_pb(request)
        profile = replace(profile, tenant_id=self._pipeline.tenant_for(profile.tenant_id, self._caller(context)))
        return ks_convert.profile_to_pb(await self._pipeline.put_profile(profile))

    @translate_errors
    async def GetRankingProfile(self, request, context):
        tenant = self._pipeline.tenant_for(request.tenant_id, self._caller(context))
        profile = await self._pipeline.get_profile(tenant, request.persona_id, request.name, request.version)
        return ks_convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        tenant = self._pipeline.tenant_for(request.tenant_id, self._caller(context))
        profiles = await self._pipeline.list_profiles(tenant, request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[ks_convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def RecordFeedback(self, request, context):
        principal = self._caller(context)
        tenant = self._pipeline.tenant_for(request.tenant_id, principal)
        user = principal.user_id if principal is not None else request.user_id
        ack, reputation = await self._pipeline.record_feedback(
            tenant, _TARGETS.get(request.target, ""), request.target_id, request.helpful, user)
        return ks_convert.feedback_ack_to_pb(ack, reputation)
