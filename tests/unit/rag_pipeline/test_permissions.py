"""The pipeline core's write rules (services/rag_pipeline/permissions.py) over a real store: a
default ranking profile needs the admin role, feedback only on documents the caller can see,
and a hidden document is answered exactly as a missing one."""
from __future__ import annotations

import pytest

from ranking.profile import RankingProfile
from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.core import RagPipeline
from shared.auth.config import AuthConfig
from shared.errors import NotFound, PermissionDenied
from shared.identity import ADMIN, Principal
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

TENANT = "acme"
ALICE = Principal(tenant_id=TENANT, user_id="alice", groups=("eng",), auth_method="api_key")
ADA = Principal(tenant_id=TENANT, user_id="ada", auth_method="api_key", roles=(ADMIN,))
CONFIG = AuthConfig.model_validate({"tenants": {TENANT: {"sources": {"legal": {"groups": ["legal"]}}}}})


@pytest.fixture
async def pipeline(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [
        doc("public", "travel policy for everyone", source_id="wiki"),
        doc("hr-only", "salary bands of every engineer", source_id="wiki", visibility_groups=("hr",)),
        doc("settlement", "the hotel settlement", source_id="legal"),
    ])
    yield RagPipeline(RagPipelineSettings(), knowledge, InProcessLanguageModel(),
                      access=AccessPolicy(knowledge, CONFIG))
    await knowledge.close()


def profile(name: str, **fields) -> RankingProfile:
    return RankingProfile(tenant_id=TENANT, name=name, **fields)


@pytest.mark.parametrize("persona", ["", "support-bot"])
async def test_making_a_default_profile_needs_the_admin_role_and_says_so(pipeline, persona):
    for change in (profile("mine", is_default=True, persona_id=persona), profile("default", persona_id=persona)):
        with pytest.raises(PermissionDenied) as err:
            await pipeline.put_profile(change, ALICE)
        assert f"'{ADMIN}' role" in str(err.value) and "alice" in str(err.value)
    assert await pipeline.list_profiles(TENANT, persona) == []


async def test_a_new_version_of_the_current_default_needs_the_admin_role_too(pipeline):
    await pipeline.put_profile(profile("fast", is_default=True, relevancy_weight=0.9), ADA)
    with pytest.raises(PermissionDenied, match="default ranking profile of tenant 'acme'"):
        await pipeline.put_profile(profile("fast", relevancy_weight=0.1), ALICE)     # would unflag it
    assert (await pipeline.resolve_profile(TENANT, "", "")).relevancy_weight == pytest.approx(0.9)


async def test_named_profiles_stay_writable_by_users_and_admins_may_set_the_default(pipeline):
    mine = await pipeline.put_profile(profile("alices-view", reputation_weight=0.5), ALICE)
    assert (mine.name, mine.is_default) == ("alices-view", False)
    stored = await pipeline.put_profile(profile("fast", is_default=True), ADA)
    assert stored.is_default
    await pipeline.put_profile(profile("alices-view", recency_weight=0.3), ALICE)     # a new version: fine
    assert (await pipeline.resolve_profile(TENANT, "", "")).name == "fast"


async def test_another_tenants_profile_is_refused(pipeline):
    with pytest.raises(PermissionDenied, match="not the caller's tenant"):
        await pipeline.put_profile(RankingProfile(tenant_id="globex", name="x"), ADA)


@pytest.mark.parametrize("target,hidden,missing", [
    ("artifact", "hr-only", "no-such-doc"),             # visibility groups
    ("entry", "hr-only#0", "no-such-doc#0"),
    ("artifact", "settlement", "no-such-doc"),          # the auth config's source rule
    ("entry", "settlement#0", "no-such-doc#0"),
])
async def test_feedback_on_a_hidden_document_is_answered_as_a_missing_one(pipeline, target, hidden, missing):
    errors = []
    for target_id in (hidden, missing):
        with pytest.raises(NotFound) as err:
            await pipeline.record_feedback(TENANT, target, target_id, True, "ignored", principal=ALICE)
        errors.append(str(err.value).replace(target_id, "<id>"))
    assert errors[0] == errors[1]
    [hit] = await pipeline._ks.get_entries(TENANT, [f"{hidden.split('#')[0]}#0"])
    assert (hit.artifact.feedback_helpful, hit.artifact.feedback_unhelpful) == (0, 0)   # nothing recorded


async def test_feedback_counts_once_per_user_and_names_the_verified_user(pipeline):
    for _ in range(3):
        ack, _rep = await pipeline.record_feedback(TENANT, "entry", "public#0", True, "someone-else",
                                                   principal=ALICE)
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0)
    ack, _rep = await pipeline.record_feedback(TENANT, "artifact", "public", False, "", principal=ALICE)
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
    hr = Principal(tenant_id=TENANT, user_id="hank", groups=("hr",), auth_method="api_key")
    ack, _rep = await pipeline.record_feedback(TENANT, "artifact", "hr-only", True, "", principal=hr)
    assert ack.feedback_helpful == 1
