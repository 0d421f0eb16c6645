"""services.knowledge_store.front: the store holds every verified caller to its tenant
and groups itself (defence in depth behind the RAGPipeline's access decisions)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from services.knowledge_store import front as policy
from shared.errors import PermissionDenied
from shared.identity import FOR_OPERATOR, Principal
from shared.records import ArtifactSummary, Entry, Hit, SearchFilters, SearchLogItem, SearchLogRecord

ALICE = Principal(tenant_id="acme", user_id="alice", groups=("eng",), auth_method="on_behalf_of")
ADMIN = Principal(tenant_id="acme", user_id="ada", roles=("admin",), auth_method="on_behalf_of")
RAG = Principal(tenant_id="", user_id="service:rag_pipeline", auth_method="service")
OPERATOR = Principal(tenant_id="", user_id="operator", roles=("admin", "operator"), auth_method="operator")


def hit(aid: str, groups: tuple[str, ...]) -> Hit:
    entry = Entry(id=f"{aid}#0", tenant_id="acme", persona_id="", artifact_id=aid, chunk_index=0, text="t",
                  headline="h", content_summary="s", timestamp_unix=0, richness=0.5)
    return Hit(entry=entry, artifact=ArtifactSummary(artifact_id=aid, visibility_groups=groups), score=1.0, rank=1)


def test_a_user_cannot_reach_another_tenant():
    with pytest.raises(PermissionDenied, match="not the caller's tenant"):
        policy.read_scope(ALICE, "globex", SearchFilters())
    assert policy.read_tenant(ALICE, "") == "acme"


def test_a_users_search_runs_under_their_groups_whatever_the_request_says():
    tenant, filters = policy.read_scope(ALICE, "acme", SearchFilters(visibility_groups=("hr", "legal")))
    assert (tenant, filters.visibility_groups, filters.enforce_visibility) == ("acme", ("eng",), True)


def test_a_service_for_no_user_sees_only_public_artifacts():
    _, filters = policy.read_scope(RAG, "acme", SearchFilters(visibility_groups=("hr",)))
    assert filters.visibility_groups == () and filters.enforce_visibility
    assert [h.artifact.artifact_id for h in policy.visible(RAG, [hit("pub", ()), hit("hr", ("hr",))])] == ["pub"]


def test_entries_fetched_by_id_are_filtered_to_the_users_groups():
    hits = [hit("pub", ()), hit("eng", ("eng",)), hit("hr", ("hr",))]
    assert [h.artifact.artifact_id for h in policy.visible(ALICE, hits)] == ["pub", "eng"]
    assert len(policy.visible(OPERATOR, hits)) == 3 and len(policy.visible(None, hits)) == 3


def test_tenant_wide_writes_need_admin_or_an_operator():
    for who in (ALICE, RAG):
        with pytest.raises(PermissionDenied, match="admin"):
            policy.write(who, "acme", "ingest")
    assert policy.write(ADMIN, "acme", "ingest") == "acme"
    assert policy.write(OPERATOR, "globex", "ingest") == "globex"
    assert policy.write(None, "globex", "ingest") == "globex"        # authentication off


def test_default_profiles_need_admin_but_named_ones_are_the_users():
    with pytest.raises(PermissionDenied, match="default ranking profile"):
        policy.profile_write(ALICE, "acme", True, "team")
    with pytest.raises(PermissionDenied):
        policy.profile_write(ALICE, "acme", False, "default")
    assert policy.profile_write(ALICE, "acme", False, "my-tuning") == "acme"
    assert policy.profile_write(ADMIN, "acme", True, "default") == "acme"


def test_a_vote_is_the_asserted_users_never_the_name_in_the_request():
    assert policy.feedback_user(ALICE, "mallory") == "alice"
    with pytest.raises(PermissionDenied):
        policy.feedback_user(RAG, "mallory")
    assert policy.feedback_user(OPERATOR, "bob") == "bob"


def test_a_logged_search_is_held_to_the_callers_tenant_and_is_the_asserted_users():
    sent = SearchLogRecord("", "s" * 16, "mallory", 1, "0" * 64, (SearchLogItem("a#0", "a", 1),))
    mine = policy.search_record(ALICE, sent)
    assert (mine.tenant_id, mine.user_id, mine.items) == ("acme", "alice", sent.items)
    with pytest.raises(PermissionDenied):
        policy.search_record(ALICE, replace(sent, tenant_id="globex"))
    assert policy.search_record(RAG, replace(sent, tenant_id="acme")).user_id == "mallory"   # a service names it


def test_an_operator_reads_the_whole_store_status_and_a_tenant_admin_its_tenants_view():
    for caller in (ALICE, RAG, Principal("acme", "ada", roles=("admin",), auth_method="api_key")):
        with pytest.raises(PermissionDenied, match="operator credential"):
            policy.store_status(caller)
    assert policy.store_status(ADMIN) == "acme"           # an admin user, asserted by the pipeline
    assert policy.store_status(OPERATOR) is None
    assert policy.store_status(None) is None              # authentication off


def test_the_pipeline_working_for_the_verified_operator_reads_the_whole_store_status_and_nothing_more():
    relayed = Principal("", "service:rag_pipeline", auth_method="service",
                        extra={"service": "rag_pipeline", FOR_OPERATOR: "1"})
    assert policy.store_status(relayed) is None                              # the whole condition
    assert policy.store_status(replace(ADMIN, extra={FOR_OPERATOR: "1"})) == "acme"     # still its tenant's view
    with pytest.raises(PermissionDenied):                  # a user's assertion never relays the operator
        policy.store_status(replace(ALICE, extra={FOR_OPERATOR: "1"}))
    with pytest.raises(PermissionDenied, match="admin"):   # no role comes with it
        policy.write(relayed, "acme", "ingest")
    _, filters = policy.read_scope(relayed, "acme", SearchFilters(visibility_groups=("hr",)))
    assert filters.enforce_visibility and filters.visibility_groups == ()
    assert [h.artifact.artifact_id for h in policy.visible(relayed, [hit("pub", ()), hit("hr", ("hr",))])] == ["pub"]


def test_a_tenants_view_of_the_store_status_holds_nothing_of_another_tenant():
    from services.knowledge_store.models import Problem, StoreStatus

    theirs = Problem(tenant_id="globex", kind="corrupt", message="/data/globex broken", since_unix=1)
    status = StoreStatus(state="degraded", data_dir="/data", read_only=False, free_bytes=5, total_bytes=9,
                         problems=(theirs,), repaired_rows=3, open_tenants=2, open_tenant_bytes=30,
                         tenants=(("globex", 20), ("acme", 10)), scrub="pass 4")
    mine = status.for_tenant("acme")
    assert (mine.state, mine.problems, mine.tenants, mine.open_tenants, mine.open_tenant_bytes) == (
        "ok", (), (("acme", 10),), 1, 10)
    assert (mine.data_dir, mine.repaired_rows, mine.scrub, mine.free_bytes) == ("", 0, "", 5)
    assert status.for_tenant("globex").state == "degraded" and status.for_tenant("globex").open_tenants == 1
