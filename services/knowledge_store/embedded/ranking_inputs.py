"""Ranking profiles and feedback votes: what a tenant keeps for the ranker besides documents.

Both are ordinary writes (writes.py) that change no index (`NO_CHANGE`); the SQL lives in
storage/ranking_inputs.py. Profiles are versioned per (tenant, persona, name), and a persona
without its own profile of a name falls back to the tenant's. Feedback counts on the
artifact: every vote names its user, and a user has one vote per artifact (a second vote
replaces the first; the counters never grow twice). Reads of a tenant that has no store yet
answer "nothing" rather than NotFound.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

from ranking.profile import RankingProfile
from services.knowledge_store import ranking_models, search_log, validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.reads import read_stored
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from shared.errors import INT32_MAX, check_int
from shared.errors import NotFound
from shared.records import FeedbackAck


class RankingInputs:
    """The store's ranking profiles, ranking models and feedback votes (a mixin of core.KnowledgeStore:
    `self._tenants` is the store's)."""

    _tenants: Tenants

    # -- ranking profiles --------------------------------------------------------------------

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        """Store `profile` as the next version of (tenant, persona, name); returns it as stored.
        No model fields (put_ranking_model names a model); the new version keeps the model of the
        one before."""
        ranking_models.refuse_model_fields(profile)
        return await self._put_profile(profile, tuned=False)

    async def _put_profile(self, profile: RankingProfile, *, tuned: bool,
                           model: tuple[str, int, bytes] | None = None) -> RankingProfile:
        validation.profile(profile)
        now = int(time.time())

        def work(conn) -> tuple[RankingProfile, IndexChange]:
            if model is not None:        # the model and the profile version naming it: one transaction
                storage.ranking_inputs.put_model(conn, model[0], model[1], model[2], now)
            version = storage.ranking_inputs.insert_profile(conn, profile, now, tuned=tuned)
            stored = storage.ranking_inputs.get_profile(conn, profile.tenant_id, profile.persona_id, profile.name,
                                                        version)
            assert stored is not None and stored.persona_id == profile.persona_id
            return stored, NO_CHANGE

        return await write(self._tenants, profile.tenant_id, work, create=True)

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        """Store a checked ranking model once by its sha256; given `profile`, also its next
        version naming the model (../ranking_models.py). Returns (sha256, the stored profile
        version or None)."""
        validation.tenant_id(tenant_id)
        sha, version = ranking_models.check_model(raw)
        if profile is not None:
            stored = await self._put_profile(ranking_models.tuned(replace(profile, tenant_id=tenant_id), sha, version),
                                             tuned=True, model=(sha, version, bytes(raw)))
            return sha, stored
        now = int(time.time())

        def work(conn) -> tuple[None, IndexChange]:
            storage.ranking_inputs.put_model(conn, sha, version, bytes(raw), now)
            return None, NO_CHANGE

        await write(self._tenants, tenant_id, work, create=True)
        return sha, None

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes | None:
        """A stored model's bytes by its sha256, None when the tenant has no such model."""
        validation.tenant_id(tenant_id)
        ranking_models.model_sha256(sha256)
        return await read_stored(self._tenants, tenant_id, lambda conn: storage.ranking_inputs.get_model(conn, sha256),
                                 absent=None)

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile | None:
        """A profile (latest version unless `version`); `name` "" = the persona's default, else
        the tenant's. A persona without its own profile of that name falls back to the tenant's."""
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        check_int("version", version, 0, INT32_MAX)         # 0 = latest

        def read(conn) -> RankingProfile | None:
            return storage.ranking_inputs.get_profile(conn, tenant_id, persona_id, name or "", version)

        return await read_stored(self._tenants, tenant_id, read, absent=None)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        """Latest version of every profile of the tenant (of one persona when given)."""
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        return await read_stored(self._tenants, tenant_id,
                                 lambda conn: storage.ranking_inputs.list_profiles(conn, tenant_id, persona_id),
                                 absent=[])

    # -- feedback ----------------------------------------------------------------------------

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "",
                              search_id: str = "") -> FeedbackAck:
        """Persist a helpful/unhelpful vote on an entry or artifact; counted on the artifact.
        A user has one vote per artifact (the latest counts). `search_id`: checked against the
        search log (../search_log.py)."""
        validation.tenant_id(tenant_id)
        validation.feedback(target, target_id, user_id, comment)
        if search_id:
            search_log.search_id(search_id)
        now = int(time.time())

        def work(conn) -> tuple[FeedbackAck, IndexChange]:
            if search_id:           # checked first: a refused vote writes nothing
                found = storage.feedback_log.get_search(conn, tenant_id, search_id)
                search_log.check_vote(found, search_id, user_id, target_id, now)
                storage.feedback_log.note_search_vote(conn, search_id, target_id, user_id, helpful, now)
            if target == "entry":
                artifact_id = storage.ranking_inputs.artifact_of_entry(conn, target_id)
            else:
                artifact_id = target_id if storage.ranking_inputs.artifact_exists(conn, target_id) else None
            if artifact_id is None:
                raise NotFound(f"{target} '{target_id}' not found in tenant '{tenant_id}'")
            helpful_n, unhelpful_n, prior = storage.ranking_inputs.record_feedback(
                conn, target=target, target_id=target_id, artifact_id=artifact_id, helpful=bool(helpful),
                user_id=user_id, comment=comment, now=now)
            return FeedbackAck(artifact_id, helpful_n, unhelpful_n, prior), NO_CHANGE

        try:
            return await write(self._tenants, tenant_id, work, create=False)
        except NotFound:
            if search_id and not self._tenants.database_path(tenant_id).is_file():
                raise search_log.unknown(search_id) from None     # no store, so no search was logged
            raise
