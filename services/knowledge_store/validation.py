"""Up-front checks of everything the core accepts; each failure names the field.

Nothing is embedded or written before a whole request has passed these checks.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from ranking.inputs import FUSIONS, RECENCY_MODES
from ranking.profile import FEEDBACK_EXPANSIONS, MAX_RERANK_TOP_N, RERANKERS, RankingProfile
from shared.errors import INT32_MAX, MAX_UNIX_TIME, check_int, check_unix_time, shown
from shared.errors import InvalidArgument
from shared.identity import TENANT_ID, TENANT_ID_RULE
from shared.analysis import ANALYSER_ID
from shared.records import AnalysedText, ArtifactMeta, SearchFilters

_PERSONA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEY = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_CHUNK = re.compile(r"^[0-9]{1,12}$")          # ASCII digits only ('²'.isdigit() is true)

MAX_ARTIFACT_ID_CHARS = 512
MAX_LABEL_CHARS = 256          # tags, owners, groups, source ids/types
MAX_LABELS = 256               # per list
MAX_KEYWORD_CHARS = 8_000
MAX_EXTRA_KEYWORDS = 32
MAX_FEEDBACK_COMMENT_CHARS = 4_000
MAX_EXTERNAL_TEXT_CHARS = 100_000  # per title / text of ScoreKeywords


def tenant_id(value: str, field: str = "tenant_id") -> str:
    if not isinstance(value, str) or not TENANT_ID.match(value):
        raise InvalidArgument(
            field, f"{value!r} is not a tenant id: {TENANT_ID_RULE}")
    return value


def persona_id(value: str, field: str = "persona_id") -> str:
    if value and not _PERSONA.match(value):
        raise InvalidArgument(
            field, f"{value!r} is not a persona id: 1-128 characters, letters, digits, "
                   "'_', '.', ':', '@', '-', starting with a letter or digit (or empty)")
    return value


def ingest_key(value: str) -> str:
    if value and not _KEY.match(value):
        raise InvalidArgument("idempotency_key", f"{value!r} is not an idempotency key: 1-128 characters, letters, "
                                                 "digits, '_', '.', ':', '-' (or empty: none)")
    return value


def artifact_id(value: str, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(field, "is required")
    if len(value) > MAX_ARTIFACT_ID_CHARS:
        raise InvalidArgument(field, f"is {len(value)} characters, at most {MAX_ARTIFACT_ID_CHARS} accepted")
    if "#" in value:
        raise InvalidArgument(field, f"{value!r} contains '#', which is reserved for entry ids")
    if _CONTROL.search(value):
        raise InvalidArgument(field, "contains control characters")
    return value


def entry_id(value: str, field: str) -> tuple[str, int]:
    """(artifact_id, chunk_index) of an entry id `artifact#chunk`."""
    artifact, sep, chunk = value.rpartition("#") if isinstance(value, str) else ("", "", "")
    if not sep or not artifact or not _CHUNK.match(chunk):
        raise InvalidArgument(field, f"{shown(value)} is not an entry id ('<artifact_id>#<chunk_index>')")
    index = int(chunk)
    if index > INT32_MAX:
        raise InvalidArgument(field, f"chunk index {shown(index)} is beyond {INT32_MAX}")
    return artifact, index


def entry_ids(values: Sequence[str], maximum: int, field: str = "entry_ids") -> list[str]:
    """GetEntries' ids checked (at most `maximum`, each an entry id), de-duplicated in order."""
    ids = list(values)
    if len(ids) > maximum:
        raise InvalidArgument(field, f"{len(ids)} ids, at most {maximum} accepted")
    for i, value in enumerate(ids):
        entry_id(value, f"{field}[{i}]")
    return list(dict.fromkeys(ids))


def labels(values: Sequence[str], field: str) -> tuple[str, ...]:
    if isinstance(values, str):
        raise InvalidArgument(field, "must be a list of strings, got one string")
    if len(values) > MAX_LABELS:
        raise InvalidArgument(field, f"has {len(values)} items, at most {MAX_LABELS} accepted")
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v or len(v) > MAX_LABEL_CHARS or _CONTROL.search(v):
            raise InvalidArgument(f"{field}[{i}]", f"must be 1-{MAX_LABEL_CHARS} printable characters")
    return tuple(values)


def label(value: str, field: str) -> str:
    if len(value) > MAX_LABEL_CHARS or _CONTROL.search(value):
        raise InvalidArgument(field, f"must be at most {MAX_LABEL_CHARS} printable characters")
    return value


def artifact(meta: ArtifactMeta, field: str) -> None:
    artifact_id(meta.artifact_id, f"{field}.artifact_id")
    for name in ("source_type", "source_id", "file_type"):
        label(getattr(meta, name), f"{field}.{name}")
    for name in ("owners", "tags", "visibility_groups"):
        labels(getattr(meta, name), f"{field}.{name}")
    for name in ("created_unix", "modified_unix"):
        check_unix_time(f"{field}.{name}", getattr(meta, name))
    prior = meta.reputation_prior
    if not isinstance(prior, (int, float)) or not (0.0 <= prior <= 1.0):
        raise InvalidArgument(f"{field}.reputation_prior", f"must be in [0, 1], got {prior!r}")


def top_k(value: int, maximum: int, field: str = "top_k") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not (1 <= value <= maximum):
        raise InvalidArgument(field, f"must be in 1..{maximum}, got {value!r}")
    return value


def filters(f: SearchFilters, field: str = "filters") -> SearchFilters:
    for name in ("date_from_unix", "date_to_unix"):
        check_int(f"{field}.{name}", getattr(f, name), 0, MAX_UNIX_TIME)      # 0 = open
    if f.date_from_unix and f.date_to_unix and f.date_from_unix > f.date_to_unix:
        raise InvalidArgument(f"{field}.date_to_unix",
                              f"{f.date_to_unix} is before date_from_unix {f.date_from_unix}")
    for name in ("source_types", "tags", "owners", "source_ids", "visibility_groups", "exclude_source_ids"):
        labels(getattr(f, name), f"{field}.{name}")
    for i, a in enumerate(f.artifact_ids):
        artifact_id(a, f"{field}.artifact_ids[{i}]")
    persona_id(f.persona_id, f"{field}.persona_id")
    return f


def query_vectors(vectors: np.ndarray | Sequence[Sequence[float]], dimension: int,
                  field: str = "query_vectors") -> np.ndarray:
    """(q, dimension) float32, C-contiguous, every value finite. Also accepts a list of rows
    (as decoded from the wire), naming the first row of the wrong length."""
    if isinstance(vectors, (list, tuple)):
        if not vectors:
            raise InvalidArgument(field, "at least one query vector is required")
        for i, row in enumerate(vectors):
            if len(row) != dimension:
                raise InvalidArgument(f"{field}[{i}]", f"expected {dimension} dims, got {len(row)}")
    array = np.asarray(vectors)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] == 0:
        raise InvalidArgument(field, f"expected a (q, {dimension}) array with q >= 1, got shape {array.shape}")
    if array.shape[1] != dimension:
        raise InvalidArgument(f"{field}[0]", f"expected {dimension} dims, got {array.shape[1]}")
    if not np.issubdtype(array.dtype, np.number):
        raise InvalidArgument(field, f"expected float32 values, got {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        raise InvalidArgument(f"{field}[{int(np.argmin(finite))}]", "contains NaN or infinity")
    return array


def profile(p: RankingProfile) -> None:
    tenant_id(p.tenant_id)
    persona_id(p.persona_id)
    if not _NAME.match(p.name or ""):
        raise InvalidArgument("name", f"{p.name!r} is not a profile name: 1-64 characters, letters, "
                                      "digits, '_', '.', ':', '-'")
    weights = {n: getattr(p, n) for n in
               ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight")}
    for name, w in weights.items():
        if not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise InvalidArgument(name, f"must be a finite number >= 0, got {w!r}")
    if sum(weights.values()) <= 0:
        raise InvalidArgument("relevancy_weight", "at least one of the four weights must be > 0")
    if p.fusion_method not in FUSIONS:
        raise InvalidArgument("fusion_method", f"{p.fusion_method!r} is not one of {', '.join(FUSIONS)}")
    if p.recency_mode not in RECENCY_MODES:
        raise InvalidArgument("recency_mode", f"{p.recency_mode!r} is not one of {', '.join(RECENCY_MODES)}")
    if not isinstance(p.dense_weight, (int, float)) or not (0.0 <= p.dense_weight <= 1.0):
        raise InvalidArgument("dense_weight", f"must be in [0, 1], got {p.dense_weight!r}")
    if not isinstance(p.recency_half_life_days, (int, float)) or not (
            math.isfinite(p.recency_half_life_days) and p.recency_half_life_days > 0):
        raise InvalidArgument("recency_half_life_days", f"must be > 0, got {p.recency_half_life_days!r}")
    if not isinstance(p.reputation_prior_strength, (int, float)) or not (
            math.isfinite(p.reputation_prior_strength) and p.reputation_prior_strength >= 0):
        raise InvalidArgument("reputation_prior_strength", f"must be >= 0, got {p.reputation_prior_strength!r}")
    if not isinstance(p.fold_duplicates, bool):
        raise InvalidArgument("fold_duplicates", f"must be true or false, got {p.fold_duplicates!r}")
    # Which re-rankers the stack has configured only LlmOrchestration knows: the RAGPipeline checks
    # that before it stores a profile (services/rag_pipeline/rerankers.py); here, the vocabulary.
    if p.reranker not in ("", *RERANKERS):
        raise InvalidArgument("reranker", f"{p.reranker!r} is not a re-ranker; accepted: '' (none), "
                                          f"{', '.join(repr(r) for r in RERANKERS)}")
    if isinstance(p.rerank_top_n, bool) or not isinstance(p.rerank_top_n, int) or not (
            1 <= p.rerank_top_n <= MAX_RERANK_TOP_N):
        raise InvalidArgument("rerank_top_n", f"must be an integer in 1..{MAX_RERANK_TOP_N}, got {p.rerank_top_n!r}")
    if not isinstance(p.rerank_weight, (int, float)) or not (0.0 <= p.rerank_weight <= 1.0):
        raise InvalidArgument("rerank_weight", f"must be in [0, 1], got {p.rerank_weight!r}")
    feedback_expansion(p.feedback_expansion)
    if p.model_sha256 and not SHA256_HEX.match(p.model_sha256):
        raise InvalidArgument("model_sha256", "must be '' (no model) or 64 lowercase hex digits")
    if isinstance(p.feature_version, bool) or not isinstance(p.feature_version, int) or not (
            0 <= p.feature_version <= INT32_MAX) or bool(p.feature_version) != bool(p.model_sha256):
        raise InvalidArgument("feature_version", f"must be > 0 with a model and 0 without, got {p.feature_version!r}")


SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")         # a hex SHA-256 (models, query hashes)


def feedback(target: str, target_id: str, user_id: str, comment: str) -> None:
    """A vote: what it targets, who casts it (one vote per user and document), its comment."""
    if target == "entry":
        entry_id(target_id, "target_id")
    elif target == "artifact":
        artifact_id(target_id, "target_id")
    else:
        raise InvalidArgument("target", f"{target!r} is not one of entry, artifact")
    if not user_id.strip():
        raise InvalidArgument("user_id", "is required: each user has one vote per document (a second vote "
                                         "replaces the first)")
    label(user_id, "user_id")
    if len(comment) > MAX_FEEDBACK_COMMENT_CHARS:
        raise InvalidArgument("comment", f"has {len(comment)} characters, at most "
                                         f"{MAX_FEEDBACK_COMMENT_CHARS} accepted")


def external_texts(texts: Sequence[tuple[str, str] | AnalysedText], maximum: int) -> None:
    """(title, text) pairs the store does not hold, to be scored with a tenant's statistics, or
    such texts already analysed (AnalysedText: this store's analyser, richness in [0, 1])."""
    if len(texts) > maximum:
        raise InvalidArgument("texts", f"{len(texts)} texts, at most {maximum} accepted")
    for i, pair in enumerate(texts):
        if isinstance(pair, AnalysedText):
            if pair.analyser != ANALYSER_ID:
                raise InvalidArgument(f"texts[{i}].analyser", f"{shown(pair.analyser)} is not this store's "
                                                              f"analyser ({ANALYSER_ID}): send the text instead")
            if not (isinstance(pair.richness, (int, float)) and 0.0 <= pair.richness <= 1.0):
                raise InvalidArgument(f"texts[{i}].richness", f"must be a number in [0, 1], got {pair.richness!r}")
            pair = (pair.title_terms, pair.body_terms)
            names = ("title_terms", "body_terms")
        else:
            names = ("title", "text")
        for name, value in zip(names, pair):
            if not isinstance(value, str):
                raise InvalidArgument(f"texts[{i}].{name}", f"must be a string, got {type(value).__name__}")
            if len(value) > MAX_EXTERNAL_TEXT_CHARS:
                raise InvalidArgument(f"texts[{i}].{name}", f"has {len(value)} characters, at most "
                                                            f"{MAX_EXTERNAL_TEXT_CHARS} accepted")


def artifact_ids(values: Sequence[str], field: str = "artifact_ids") -> list[str]:
    """A delete's artifact ids: at least one, each valid; duplicates dropped, order kept."""
    ids = list(values)
    if not ids:
        raise InvalidArgument(field, "at least one artifact id is required")
    for i, a in enumerate(ids):
        artifact_id(a, f"{field}[{i}]")
    return list(dict.fromkeys(ids))


def feedback_expansion(value: object) -> str:
    """A profile's or a keyword search's keyword feedback expansion: "" (off) or one of
    FEEDBACK_EXPANSIONS (services/knowledge_store/keywords.py)."""
    if not isinstance(value, str) or value not in FEEDBACK_EXPANSIONS:
        raise InvalidArgument("feedback_expansion", f"{shown(value)} is not a feedback expansion; accepted: "
                                                    f"{', '.join(repr(f) for f in FEEDBACK_EXPANSIONS)}")
    return value
