"""Checking a SearchAndRank request up front: each problem names its field and what is accepted."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from ranking.inputs import FUSIONS, RECENCY_MODES
from services.rag_pipeline.models import SearchRequest
from shared.errors import check_unix_time
from shared.errors import InvalidArgument, PermissionDenied
from shared.identity import Principal, is_verified_operator, relays_operator
from shared.records import SearchFilters
from shared.settings import RagPipelineSettings

MAX_EXTRA_PHRASES = 4


def check_operator_options(request: SearchRequest, principal: Principal) -> None:
    """PermissionDenied for an option only operators may set (`embed_timeout_s`), set by anybody else."""
    if request.embed_timeout_s and not (is_verified_operator(principal) or relays_operator(principal)):
        raise PermissionDenied("embed_timeout_s: a longer embed deadline is for operator calls only")


def settings_for(request: SearchRequest, s: RagPipelineSettings) -> RagPipelineSettings:
    """The settings one (validated) request runs under: an operator's embed deadline, if it asks."""
    return s.model_copy(update={"embed_timeout_s": request.embed_timeout_s}) if request.embed_timeout_s else s


def validate_request(request: SearchRequest, s: RagPipelineSettings) -> SearchRequest:
    """The request with its query stripped and both k resolved from the settings' defaults;
    InvalidArgument (naming the field) when anything is out of range."""
    if not request.tenant_id:
        raise InvalidArgument("tenant_id", "is required (it comes from the caller's identity)")
    query = request.query.strip() if request.query else ""
    if not query:
        raise InvalidArgument("user_query_text", "must not be empty")
    if len(request.query) > s.max_query_chars:
        raise InvalidArgument("user_query_text",
                              f"is {len(request.query)} characters; at most {s.max_query_chars} accepted")
    if request.embed_timeout_s and not 0 < request.embed_timeout_s <= s.deadline_s:
        raise InvalidArgument("embed_timeout_s", f"must be between 0 and the request deadline, {s.deadline_s:g} s "
                                                 f"(0: the server's {s.embed_timeout_s:g} s), "
                                                 f"got {request.embed_timeout_s}")
    k_final = request.top_k_final or s.default_top_k_final
    k_init = request.top_k_initial or max(s.default_top_k_initial, k_final)
    if not 1 <= k_final <= s.max_top_k_final:
        raise InvalidArgument("top_k_final_rank", f"must be between 1 and {s.max_top_k_final}, got {k_final}")
    if not 1 <= k_init <= s.max_top_k_initial:
        raise InvalidArgument("top_k_initial_retrieve", f"must be between 1 and {s.max_top_k_initial}, got {k_init}")
    if k_init < k_final:
        raise InvalidArgument("top_k_initial_retrieve",
                              f"must be >= top_k_final_rank ({k_final}), got {k_init}")
    validate_filters(request.filters)
    prefs = request.prefs
    if prefs.weights is not None:
        validate_weights(prefs.weights, "ranking_prefs")
    if prefs.fusion and prefs.fusion not in FUSIONS:
        raise InvalidArgument("ranking_prefs.fusion_method", f"must be one of {FUSIONS}")
    if prefs.recency_mode and prefs.recency_mode not in RECENCY_MODES:
        raise InvalidArgument("ranking_prefs.recency_mode", f"must be one of {RECENCY_MODES}")
    if prefs.half_life_days < 0 or not math.isfinite(prefs.half_life_days):
        raise InvalidArgument("ranking_prefs.recency_half_life_days", "must be a finite number >= 0")
    if request.query_vector is not None:
        vec = np.asarray(request.query_vector, dtype=np.float32)
        if vec.ndim != 1 or vec.size == 0 or not np.all(np.isfinite(vec)):
            raise InvalidArgument("user_query_vector", "must be a non-empty list of finite floats")
    if len(request.extra_phrases) > MAX_EXTRA_PHRASES:
        raise InvalidArgument("extra_query_phrases",
                              f"at most {MAX_EXTRA_PHRASES} accepted, got {len(request.extra_phrases)}")
    for i, phrase in enumerate(request.extra_phrases):
        if not phrase.strip():
            raise InvalidArgument(f"extra_query_phrases[{i}]", "must not be empty")
        if len(phrase) > s.max_query_chars:
            raise InvalidArgument(f"extra_query_phrases[{i}]", f"at most {s.max_query_chars} characters accepted")
    return replace(request, query=query, top_k_final=k_final, top_k_initial=k_init)


def validate_filters(f: SearchFilters, field: str = "filters") -> None:
    """The date bounds of the filters: unix seconds in range (0 = open), from <= to."""
    check_unix_time(f"{field}.date_from_unix", f.date_from_unix)
    check_unix_time(f"{field}.date_to_unix", f.date_to_unix)
    if f.date_from_unix and f.date_to_unix and f.date_from_unix > f.date_to_unix:
        raise InvalidArgument(f"{field}.date_to_unix",
                              f"{f.date_to_unix} is before date_from_unix {f.date_from_unix}")


def validate_weights(weights: Sequence[float], field: str) -> None:
    """The four 4R weights: each finite and >= 0, not all zero."""
    names = ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight")
    for name, w in zip(names, weights):
        if not math.isfinite(w) or w < 0:
            raise InvalidArgument(f"{field}.{name}", f"must be a finite number >= 0, got {w}")
    if sum(weights) <= 0:
        raise InvalidArgument(f"{field}.weights", "must not all be zero")
