"""The Qdrant data model of the KnowledgeStore: collection names, deterministic point ids, and
the requests that create the collections (`collection_plan`, a list of client calls, so what
is sent can be inspected: local mode ignores payload indexes and shard keys).

    <prefix>_chunks      one point per entry version: named dense vector "dense" (cosine,
                         the embedder's dimension) and named sparse vector "bm25" (saturated
                         BM25 term frequencies of our analyser's terms, bm25.py); payload:
                         the entry, its artifact's metadata, dates as unix times, `current`
    <prefix>_artifacts   payload only: one point per artifact (its metadata, current version,
                         entry count, feedback counters, `pending` while a replacement runs)
    <prefix>_term_stats  payload only: per tenant, TERM_BUCKETS points holding the document
                         frequency of each term (by term index mod TERM_BUCKETS: a write
                         touches at most that many points) and one point for the tenant
                         (entries, total length)
    <prefix>_profiles    payload only: ranking profiles, one point per version
    <prefix>_votes       payload only: each user's current vote per artifact
    <prefix>_feedback    payload only: every vote ever cast, with its comment
    <prefix>_personas    payload only: persona agents' settings, one point per persona
    <prefix>_searches    payload only: the search log (../search_log.py), one point per search
    <prefix>_source_votes payload only: each user's current vote per federated source
    <prefix>_models      payload only: ranking models (base64 JSON), one point per (tenant, sha256)

Tenant generations: every point of a tenant carries the generation it belongs to (`tenant_gen`,
absent = 0) and its id is derived from the tenant id and that generation (filters.Tenant.key);
the term statistics collection holds one generation record per imported tenant (`kind`
"generation", `serving`: the generation readers see; no `tenant_id`, so no tenant filter ever
matches it). An import writes a new generation and switches `serving` in one upsert (archive.py).

Every collection has a `tenant_id` keyword payload index marked `is_tenant` (Qdrant co-locates
a tenant's points and plans filtered searches per tenant). On a cluster the chunks collection
uses custom sharding: tenants named in `qdrant_shard_key_tenants` get a shard key of their own,
every other tenant shares the "default" key (tiered multitenancy); local mode has no shards.

Point ids are uuid5 of what identifies the point (tenant, artifact, chunk, version for a
chunk), so a retried ingest writes the same points again: ingest is idempotent.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qdrant_client import models as qm

NAMESPACE = uuid.UUID("6f1c0d7e-5b1a-4f0e-9a57-4e75636c6575")
DENSE = "dense"
SPARSE = "bm25"
DEFAULT_SHARD_KEY = "default"


def point_id(*parts: object) -> str:
    return str(uuid.uuid5(NAMESPACE, "\x1f".join(str(p) for p in parts)))


def chunk_id(tenant_id: str, artifact_id: str, chunk_index: int, version: str) -> str:
    return point_id("chunk", tenant_id, artifact_id, chunk_index, version)


def artifact_point(tenant_id: str, artifact_id: str) -> str:
    return point_id("artifact", tenant_id, artifact_id)


def tenant_point(tenant_id: str) -> str:
    return point_id("tenant", tenant_id)


def generation_point(tenant_id: str) -> str:
    """The tenant's generation record: which generation of its points is served (../archive.py)."""
    return point_id("generation", tenant_id)


TERM_BUCKETS = 256


def term_bucket(term: int) -> int:
    return term % TERM_BUCKETS


def term_bucket_point(tenant_id: str, bucket: int) -> str:
    """The point holding the tenant's document frequencies of the terms in `bucket`."""
    return point_id("terms", tenant_id, bucket)


def profile_point(tenant_id: str, persona_id: str, name: str, version: int) -> str:
    return point_id("profile", tenant_id, persona_id, name, version)


def model_point(tenant_id: str, sha256: str) -> str:
    return point_id("model", tenant_id, sha256)


def persona_point(tenant_id: str, persona_id: str) -> str:
    return point_id("persona", tenant_id, persona_id)


def vote_point(tenant_id: str, artifact_id: str, user_id: str) -> str:
    return point_id("vote", tenant_id, artifact_id, user_id)


def search_point(tenant_id: str, search_id: str) -> str:
    return point_id("search", tenant_id, search_id)


def source_vote_point(tenant_id: str, source_id: str, user_id: str) -> str:
    return point_id("source_vote", tenant_id, source_id, user_id)


def row_id(point: str) -> int:
    """The 63-bit row id of a chunk point (what `CandidateColumns.row_ids` and score
    completion name rows by): the top bits of its uuid, so every replica derives the same."""
    return uuid.UUID(point).int >> 65


def vector_hash(values) -> str:
    """The hash of a dense vector as Qdrant holds it (a point's `vector_sha`, consistency.py)."""
    return hashlib.sha256(np.asarray(values, np.float32).tobytes()).hexdigest()[:32]


def cosine_stored(vector: np.ndarray) -> np.ndarray:
    """A vector as a cosine collection stores it (Qdrant divides it by its norm; a server's
    arithmetic may differ in the last bit, which the read-back of consistency.py corrects)."""
    v = np.asarray(vector, np.float32)
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def term_index(term: str) -> int:
    """The sparse-vector index of an analysed term: 32 bits of its blake2b hash (no shared
    vocabulary, so replicas agree without coordination; a collision merges two terms' counts,
    at 30k terms per tenant ~1 pair in 10k tenants)."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little")


@dataclass(frozen=True)
class Collections:
    prefix: str

    @property
    def chunks(self) -> str:
        return f"{self.prefix}_chunks"

    @property
    def artifacts(self) -> str:
        return f"{self.prefix}_artifacts"

    @property
    def term_stats(self) -> str:
        return f"{self.prefix}_term_stats"

    @property
    def profiles(self) -> str:
        return f"{self.prefix}_profiles"

    @property
    def votes(self) -> str:
        return f"{self.prefix}_votes"

    @property
    def feedback(self) -> str:
        return f"{self.prefix}_feedback"

    @property
    def personas(self) -> str:
        return f"{self.prefix}_personas"

    @property
    def searches(self) -> str:
        return f"{self.prefix}_searches"

    @property
    def source_votes(self) -> str:
        return f"{self.prefix}_source_votes"

    @property
    def models(self) -> str:
        return f"{self.prefix}_models"

    def payload_only(self) -> tuple[str, ...]:
        return (self.artifacts, self.term_stats, self.profiles, self.votes, self.feedback, self.personas,
                self.searches, self.source_votes, self.models)


@dataclass(frozen=True)
class Call:
    """One client call of the plan: `getattr(client, method)(**kwargs)`."""
    method: str
    kwargs: dict[str, Any] = field(default_factory=dict)


# Keyword / integer / float / bool payload indexes of the chunks collection: every field a
# filter or the listing's order reads.
CHUNK_INDEXES: tuple[tuple[str, Any], ...] = (
    ("artifact_id", qm.PayloadSchemaType.KEYWORD), ("version", qm.PayloadSchemaType.KEYWORD),
    ("current", qm.PayloadSchemaType.BOOL), ("entry_id", qm.PayloadSchemaType.KEYWORD),
    ("persona_id", qm.PayloadSchemaType.KEYWORD), ("source_type", qm.PayloadSchemaType.KEYWORD),
    ("source_id", qm.PayloadSchemaType.KEYWORD), ("tags", qm.PayloadSchemaType.KEYWORD),
    ("owners", qm.PayloadSchemaType.KEYWORD), ("visibility_groups", qm.PayloadSchemaType.KEYWORD),
    ("public", qm.PayloadSchemaType.BOOL), ("time", qm.PayloadSchemaType.INTEGER),
    ("row_id", qm.PayloadSchemaType.INTEGER),
)


# Full-text index of the chunks' text (the server's word tokenizer, lower-cased: the analyser's
# `words` split the same way), so a quoted phrase's candidate entries are found by a text match
# instead of a scan of the tenant (store.py, `_phrase_holders`).
TEXT_INDEX = ("text", qm.TextIndexParams(type=qm.TextIndexType.TEXT, tokenizer=qm.TokenizerType.WORD,
                                         lowercase=True))


def tenant_index(collection: str) -> list[Call]:
    """The tenant index and the generation's (filters.GEN) of a collection."""
    return [Call("create_payload_index", {
        "collection_name": collection, "field_name": "tenant_id",
        "field_schema": qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)}),
        Call("create_payload_index", {"collection_name": collection, "field_name": "tenant_gen",
                                      "field_schema": qm.PayloadSchemaType.INTEGER})]


def collection_plan(names: Collections, dimension: int, *, cluster: bool, shards: int = 2,
                    replication_factor: int = 1, write_consistency: int = 1,
                    shard_key_tenants: tuple[str, ...] = ()) -> list[Call]:
    """The calls that create every collection and index (run for the collections that do not
    exist yet). On a cluster the chunks collection is custom-sharded with one shard key per
    big tenant plus the default key; local mode gets the same collections without shards."""
    layout: dict[str, Any] = {}
    if cluster:
        layout = {"shard_number": shards, "replication_factor": replication_factor,
                  "write_consistency_factor": write_consistency}
    plan = [Call("create_collection", {
        "collection_name": names.chunks,
        "vectors_config": {DENSE: qm.VectorParams(size=dimension, distance=qm.Distance.COSINE)},
        "sparse_vectors_config": {SPARSE: qm.SparseVectorParams()},   # no IDF modifier: the query
        **layout,                                                     # carries the tenant's idf
        **({"sharding_method": qm.ShardingMethod.CUSTOM} if cluster else {}),
    })]
    if cluster:
        for key in (DEFAULT_SHARD_KEY, *shard_key_tenants):
            plan.append(Call("create_shard_key", {"collection_name": names.chunks, "shard_key": key}))
    plan += tenant_index(names.chunks)
    for name, schema in (*CHUNK_INDEXES, TEXT_INDEX):
        plan.append(Call("create_payload_index", {"collection_name": names.chunks, "field_name": name,
                                                  "field_schema": schema}))
    for collection in names.payload_only():
        plan.append(Call("create_collection", {"collection_name": collection, "vectors_config": {}, **layout}))
        plan += tenant_index(collection)
    for collection, name, schema in (
            (names.artifacts, "pending", qm.PayloadSchemaType.BOOL),
            (names.term_stats, "kind", qm.PayloadSchemaType.KEYWORD),
            (names.votes, "artifact_id", qm.PayloadSchemaType.KEYWORD),
            (names.searches, "created_unix", qm.PayloadSchemaType.INTEGER),
            (names.source_votes, "source_id", qm.PayloadSchemaType.KEYWORD)):
        plan.append(Call("create_payload_index", {"collection_name": collection, "field_name": name,
                                                  "field_schema": schema}))
    return plan
