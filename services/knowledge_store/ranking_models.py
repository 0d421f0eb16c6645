"""Stored ranking models: checked once, kept once by their sha256, named by profile versions.

    check_model(raw)          the model bounds-checked and parsed as the ranking would serve it
                              (ranking/trees.py: size, pickle, JSON nesting, trees, leaves, depth,
                              this stack's feature version and names) -> (sha256, feature version)
    refuse_model_fields(p)    put_ranking_profile never names a model: InvalidArgument naming the
                              field (only `nucleus tune`, through PutRankingModel, sets one)
    tuned(p, sha, version)    the profile version PutRankingModel stores: `p` naming the model
    served(raw, tenant, sha)  GetRankingModel's answer: the bytes, or NotFound for a hash the tenant lacks

A model is stored once per tenant by its sha256 (the embedded backend's `ranking_models`
table, the qdrant backend's `<prefix>_models` collection); storing the same bytes again is a
no-op. Profile listings carry the hash, never the bytes; GetRankingModel reads the bytes.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.profile import RankingProfile, refuse_model_fields
from ranking.trees import load_model
from services.knowledge_store import validation
from shared.errors import InvalidArgument, NotFound

__all__ = ["check_model", "model_sha256", "refuse_model_fields", "served", "tuned"]


def check_model(raw: bytes) -> tuple[str, int]:
    """(sha256 hex, feature version) of a model this stack can serve; InvalidArgument("model", why)."""
    if not isinstance(raw, (bytes, bytearray)) or not raw:
        raise InvalidArgument("model", "expected the model's JSON bytes (the envelope `nucleus tune` writes)")
    load_model(bytes(raw), FEATURE_NAMES, FEATURE_VERSION)
    return hashlib.sha256(bytes(raw)).hexdigest(), FEATURE_VERSION


def model_sha256(value: str) -> str:
    if not isinstance(value, str) or not validation.SHA256_HEX.match(value):
        raise InvalidArgument("model_sha256", f"{value!r} is not a sha256: 64 lowercase hex digits")
    return value


def tuned(p: RankingProfile, sha256: str, feature_version: int) -> RankingProfile:
    return replace(p, model_sha256=sha256, feature_version=feature_version)


def served(raw: bytes | None, tenant_id: str, sha256: str) -> bytes:
    """The stored model's bytes (a backend's `get_ranking_model`); NotFound when the tenant has none."""
    if raw is None:
        raise NotFound(f"no ranking model {sha256} in tenant '{tenant_id}'")
    return raw
