"""The access rules of the RAG tools: source visibility, session-tag restriction, entry checks."""
from __future__ import annotations

import pytest

from shared.records import ArtifactSummary, Entry, Hit
from services.rag_pipeline.access import AccessPolicy, Scope, SourceView, session_restriction
from shared.auth.config import AuthConfig
from shared.identity import Principal

CONFIG = AuthConfig.model_validate({"tenants": {"acme": {
    "session_tag_prefixes": ["department:"], "sources": {"legal": {"groups": ["legal"]}}}}})


def _view(**kw) -> SourceView:
    base = dict(source_id="s", name="s", source_types=("wiki",), artifacts=3, entries=9, last_indexed_unix=1,
                content_groups=(), has_public=True, rule_groups=None, tags=())
    base.update(kw)
    return SourceView(**base)


@pytest.mark.parametrize("view,groups,visible", [
    (_view(), (), True),
    (_view(content_groups=("security-team",), has_public=True), (), True),      # a public artifact in it
    (_view(content_groups=("security-team",), has_public=False), (), False),
    (_view(content_groups=("security-team",), has_public=False), ("security-team",), True),
    (_view(rule_groups=("legal",)), ("eng",), False),                             # the config rule decides
    (_view(rule_groups=("legal",)), ("legal",), True),
    (_view(rule_groups=()), (), True),
])
def test_source_visibility(view, groups, visible):
    assert view.visible_to(groups) is visible


def test_counts_are_shown_only_when_the_caller_sees_every_group_in_use():
    view = _view(content_groups=("hr",), has_public=True)
    assert not view.fully_visible_to(())
    assert view.fully_visible_to(("hr", "eng"))


def test_session_tags_restrict_only_with_a_matching_tenant_prefix():
    tagged = Principal(tenant_id="acme", user_id="u", session_tags=("department:sales", "Q4"))
    assert session_restriction(tagged, CONFIG) == ("department:sales",)
    assert session_restriction(Principal(tenant_id="globex", user_id="u", session_tags=("department:sales",)),
                               CONFIG) == ()


def test_scope_keeps_only_hits_with_the_callers_own_tags_after_a_restriction():
    scope = Scope(filters=None, post_tags=("q4",))  # type: ignore[arg-type]
    assert scope.keep(("q4", "x")) and not scope.keep(("x",))
    assert Scope(filters=None).keep(())  # type: ignore[arg-type]


def _hit(groups=(), source="wiki", tags=(), tenant="acme") -> Hit:
    entry = Entry(id="a#0", tenant_id=tenant, persona_id="", artifact_id="a", chunk_index=0, text="t", headline="h",
                  content_summary="s", timestamp_unix=0, richness=0.5)
    return Hit(entry=entry, artifact=ArtifactSummary(artifact_id="a", source_id=source, visibility_groups=groups,
                                                     tags=tags), score=0.0, rank=1)


@pytest.mark.parametrize("hit,principal,allowed", [
    (_hit(), Principal("acme", "u"), True),
    (_hit(groups=("hr",)), Principal("acme", "u"), False),
    (_hit(groups=("hr",)), Principal("acme", "u", groups=("hr",)), True),
    (_hit(source="legal"), Principal("acme", "u", groups=("eng",)), False),
    (_hit(source="legal"), Principal("acme", "u", groups=("legal",)), True),
    (_hit(tenant="globex"), Principal("acme", "u"), False),
    (_hit(tags=("department:hr",)), Principal("acme", "u", session_tags=("department:sales",)), False),
    (_hit(tags=("department:sales",)), Principal("acme", "u", session_tags=("department:sales",)), True),
])
def test_entry_decisions(hit, principal, allowed):
    assert (AccessPolicy(None, CONFIG).entry_denial(principal, hit) == "") is allowed  # type: ignore[arg-type]
