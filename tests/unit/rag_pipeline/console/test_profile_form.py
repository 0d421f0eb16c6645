"""The profile editor's form: every RankingProfile field listed from the dataclass, each field's
type checked at once, store errors put on the field they name, and the diff of two versions."""
from __future__ import annotations

from dataclasses import fields, replace

from ranking.profile import RankingProfile
from services.rag_pipeline.console.profile_form import (NOT_EDITED, diff, editable_fields, field_of, form_values,
                                                        parse_profile)
from shared.errors import InvalidArgument, NotFound


def test_every_profile_field_but_the_stored_ones_is_editable_with_its_kind():
    listed = {f.name: f for f in editable_fields()}
    assert set(listed) == {f.name for f in fields(RankingProfile)} - set(NOT_EDITED)
    assert listed["relevancy_weight"].kind == "number" and listed["is_default"].kind == "flag"
    assert listed["fusion_method"].kind == "choice" and "rrf" in listed["fusion_method"].choices
    assert listed["name"].kind == "text"


def test_a_form_of_the_defaults_parses_to_the_default_profile():
    form = {k: str(v) for k, v in form_values(None).items() if k != "is_default"}
    profile, errors = parse_profile("acme", form)
    assert errors == {} and profile == RankingProfile(tenant_id="acme")


def test_every_mistyped_field_is_named_at_once_and_nothing_is_built():
    form = {k: str(v) for k, v in form_values(None).items()}
    form.update(relevancy_weight="lots", recency_weight="nan", fusion_method="best", name="x" * 200)
    profile, errors = parse_profile("acme", form)
    assert profile is None
    assert set(errors) == {"relevancy_weight", "recency_weight", "fusion_method", "name"}
    assert "one of" in errors["fusion_method"] and "rrf" in errors["fusion_method"]


def test_a_checkbox_left_out_is_false_and_a_ticked_one_true():
    form = {k: str(v) for k, v in form_values(None).items() if k != "is_default"}
    assert parse_profile("acme", form)[0].is_default is False
    assert parse_profile("acme", {**form, "is_default": "1"})[0].is_default is True


def test_a_store_error_lands_on_the_field_it_names_else_on_the_form():
    assert field_of(InvalidArgument("dense_weight", "must be in [0, 1]")) == "dense_weight"
    assert field_of(InvalidArgument("profile.recency_mode", "bad")) == "recency_mode"
    assert field_of(InvalidArgument("tenant_id", "bad")) == ""
    assert field_of(NotFound("dense_weight: no")) == "dense_weight"


def test_the_diff_lists_only_changed_fields_and_everything_for_a_first_version():
    v1 = RankingProfile(tenant_id="acme", name="p", version=1, updated_unix=10)
    v2 = replace(v1, version=2, updated_unix=20, dense_weight=0.3, recency_mode="never")
    assert diff(v1, v2) == [("dense_weight", v1.dense_weight, 0.3), ("recency_mode", "auto", "never")]
    assert diff(v1, replace(v1, version=3)) == []
    assert {name for name, _, _ in diff(None, v1)} == {f.name for f in editable_fields()}


def test_float32_noise_is_neither_shown_nor_a_change():
    v1 = RankingProfile(tenant_id="acme", name="p", version=1, relevancy_weight=0.699999988079071)
    assert form_values(v1)["relevancy_weight"] == 0.7
    assert diff(replace(v1, relevancy_weight=0.7), v1) == []


def test_the_editor_never_sets_a_model_and_a_form_naming_one_is_refused_on_that_field():
    listed = {f.name: f for f in editable_fields()}
    assert "model_sha256" not in listed and "feature_version" not in listed
    assert listed["feedback_expansion"].kind == "choice" and listed["feedback_expansion"].choices == ("", "rm3")
    form = {k: str(v) for k, v in form_values(None).items() if k != "is_default"}
    for field, value in (("model_sha256", "ab" * 32), ("feature_version", "1")):
        profile, errors = parse_profile("acme", {**form, field: value})
        assert profile is None and "nucleus tune" in errors[field]
