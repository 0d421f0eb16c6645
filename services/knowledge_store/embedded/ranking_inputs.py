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


# -- ranking profiles ------------------------------------------------------------------------

async def put_profile(tenants: Tenants, profile: RankingProfile) -> RankingProfile:
    """put_ranking_profile: no model fields; the new version keeps the model of the one before."""
    ranking_models.refuse_model_fields(profile)
    return await _put_profile(tenants, profile, tuned=False)


async def _put_profile(tenants: Tenants, profile: RankingProfile, *, tuned: bool,
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

    return await write(tenants, profile.tenant_id, work, create=True)


async def put_ranking_model(tenants: Tenants, tenant_id: str, raw: bytes,
                            profile: RankingProfile | None) -> tuple[str, RankingProfile | None]:
    """Store a checked model once by its sha256 and, given `profile`, a new version of it naming
    the model (ranking_models.py); returns (sha256, the stored profile version or None)."""
    validation.tenant_id(tenant_id)
    sha, version = ranking_models.check_model(raw)
    if profile is not None:
        stored = await _put_profile(tenants, ranking_models.tuned(replace(profile, tenant_id=tenant_id), sha, version),
                                    tuned=True, model=(sha, version, bytes(raw)))
        return sha, stored
    now = int(time.time())

    def work(conn) -> tuple[None, IndexChange]:
        storage.ranking_inputs.put_model(conn, sha, version, bytes(raw), now)
        return None, NO_CHANGE

    await write(tenants, tenant_id, work, create=True)
    return sha, None


async def get_ranking_model(tenants: Tenants, tenant_id: str, sha256: str) -> bytes | None:
    validation.tenant_id(tenant_id)
    ranking_models.model_sha256(sha256)
    return await read_stored(tenants, tenant_id, lambda conn: storage.ranking_inputs.get_model(conn, sha256),
                             absent=None)


async def get_profile(tenants: Tenants, tenant_id: str, persona_id: str, name: str,
                      version: int) -> RankingProfile | None:
    validation.tenant_id(tenant_id)
    validation.persona_id(persona_id)
    check_int("version", version, 0, INT32_MAX)         # 0 = latest

    def read(conn) -> RankingProfile | None:
        return storage.ranking_inputs.get_profile(conn, tenant_id, persona_id, name or "", version)

    return await read_stored(tenants, tenant_id, read, absent=None)


async def list_profiles(tenants: Tenants, tenant_id: str, persona_id: str) -> list[RankingProfile]:
    validation.tenant_id(tenant_id)
    validation.persona_id(persona_id)
    return await read_stored(tenants, tenant_id,
                             lambda conn: storage.ranking_inputs.list_profiles(conn, tenant_id, persona_id), absent=[])


# -- feedback --------------------------------------------------------------------------------

async def record_feedback(tenants: Tenants, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                          helpful: bool, user_id: str, *, comment: str, search_id: str = "") -> FeedbackAck:
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
        return await write(tenants, tenant_id, work, create=False)
    except NotFound:
        if search_id and not tenants.database_path(tenant_id).is_file():
            raise search_log.unknown(search_id) from None     # no store, so no search was logged
        raise
