"""`nucleus migrate --to qdrant --tenant T`: copy a tenant from the embedded store to Qdrant.

    nucleus migrate --to qdrant --tenant acme --qdrant-url http://qdrant:6333
    nucleus migrate --to qdrant --tenant acme --qdrant-path ./qdrant-data     # local mode
    nucleus migrate --to qdrant --tenant acme --verify-only
    nucleus migrate --to qdrant --tenant acme --recount       # Qdrant side only: see below

Reads the tenant's SQLite file read-only (a running KnowledgeStore may keep serving it), and
writes artifact by artifact in batches through the qdrant backend's own write path, with the
stored vectors (nothing is re-embedded) and the stored analysed terms; then the tenant's ranking
profiles, feedback votes, votes on federated sources and the search log. Resumable: after each
batch the last artifact copied is written to a checkpoint file next to the tenant's database,
and a new run continues after it (a batch written twice is harmless: point ids are
deterministic). Then the sparse vectors are
re-saturated with the tenant's final average length, and the copy is verified: the same
artifact and entry counts, and sample searches (stored vectors as dense queries, stored
headlines as keyword queries) returning the same top 10 on both. Exit 0 when they agree, 1 if not.

`--recount` touches only the Qdrant side: it recounts the tenant's term statistics from its
entries and re-saturates their sparse vectors with the current average length (after
concurrent writers to one tenant let the statistics drift: docs/SCALE.md).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from services.knowledge_store.backend import open_store
from services.knowledge_store.preparation import PreparedDocument as _Prepared
from services.knowledge_store.embedded.storage.db import DB_FILE, tenant_dir_name
from services.knowledge_store.preparation import EntryRow
from services.knowledge_store.profiles import select_columns
from shared.errors import FailedPrecondition, NotFound
from shared.records import ArtifactMeta, SearchFilters
from shared.settings import KnowledgeStoreSettings

if TYPE_CHECKING:     # the Qdrant client is imported where a command uses it: every other `nucleus`
    from services.knowledge_store.qdrant import QdrantKnowledgeStore    # command starts without it

_ARTIFACT_COLUMNS = ("artifact_id, title, source_type, source_id, source_uri, file_name, file_type, created_unix, "
                     "modified_unix, owners, tags, reputation_prior, visibility_groups, persona_id, "
                     "feedback_helpful, feedback_unhelpful")


class _NoEmbedder:
    async def embed(self, texts: list[str]) -> np.ndarray:     # the stored vectors are copied instead
        raise FailedPrecondition("migrate copies stored vectors; nothing is embedded")


def register(subparsers) -> None:
    p = subparsers.add_parser("migrate", help="copy a tenant from the embedded store to Qdrant (resumable, verified)")
    p.add_argument("--to", choices=["qdrant"], required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--from-data-dir", type=Path, help="the embedded store's data directory "
                                                      "(default: NUCLEUS_KS_DATA_DIR or <data-dir>/knowledge_store)")
    p.add_argument("--qdrant-url", default=None, help="default NUCLEUS_QDRANT_URL")
    p.add_argument("--qdrant-path", type=Path, default=None, help="local mode folder (default NUCLEUS_QDRANT_PATH)")
    p.add_argument("--batch", type=int, default=200, help="artifacts per write (default 200)")
    p.add_argument("--samples", type=int, default=20, help="sample searches of the verification (default 20)")
    p.add_argument("--restart", action="store_true", help="ignore the checkpoint and copy everything again")
    p.add_argument("--verify-only", action="store_true")
    p.add_argument("--recount", action="store_true",
                   help="only recount the tenant's term statistics in Qdrant and re-saturate its vectors")
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {"backend": "qdrant"}
    if args.from_data_dir:
        overrides["data_dir"] = args.from_data_dir
    if args.qdrant_url:
        overrides["qdrant_url"] = args.qdrant_url
    if args.qdrant_path:
        overrides["qdrant_path"] = args.qdrant_path
    settings = KnowledgeStoreSettings(**overrides)
    if args.recount:
        return asyncio.run(recount(settings, args.tenant))
    return asyncio.run(migrate(settings, args.tenant, batch=args.batch, samples=args.samples,
                               restart=args.restart, verify_only=args.verify_only))


async def recount(settings: KnowledgeStoreSettings, tenant_id: str, log=print) -> int:
    from services.knowledge_store.qdrant import QdrantKnowledgeStore

    store = QdrantKnowledgeStore(settings, _NoEmbedder())
    try:
        await store._ensure()
        await store._require_tenant(tenant_id)
        await store.recount(tenant_id)
        rewritten = await store.resaturate(tenant_id)
        stats = await store.stats(tenant_id)
        log(f"recounted tenant {tenant_id}: {stats.entries} entries; re-saturated {rewritten} sparse vectors")
        return 0
    finally:
        store.close()


def _connect(settings: KnowledgeStoreSettings, tenant_id: str) -> tuple[sqlite3.Connection, Path]:
    path = Path(settings.data_dir) / "tenants" / tenant_dir_name(tenant_id) / DB_FILE
    if not path.is_file():
        raise NotFound(f"tenant '{tenant_id}' has no embedded store at {path}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return conn, path


async def migrate(settings: KnowledgeStoreSettings, tenant_id: str, *, batch: int = 200, samples: int = 20,
                  restart: bool = False, verify_only: bool = False, log=print) -> int:
    conn, path = _connect(settings, tenant_id)
    checkpoint = path.with_name("migrate-qdrant.json")
    from services.knowledge_store.qdrant import QdrantKnowledgeStore

    target = QdrantKnowledgeStore(settings, _NoEmbedder())
    try:
        if not verify_only:
            after = "" if restart or not checkpoint.exists() else json.loads(checkpoint.read_text())["after"]
            if after:
                log(f"resuming after artifact {after!r} (checkpoint {checkpoint})")
            copied = 0
            while True:
                rows = conn.execute(f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE artifact_id > ? "
                                    f"ORDER BY artifact_id LIMIT ?", (after, batch)).fetchall()
                if not rows:
                    break
                await _copy_batch(conn, target, tenant_id, rows)
                after = rows[-1][0]
                copied += len(rows)
                checkpoint.write_text(json.dumps({"tenant": tenant_id, "after": after}) + "\n")
                log(f"copied {copied} artifacts (through {after!r})")
            await _copy_profiles_and_votes(conn, target, tenant_id)
            rewritten = await target.resaturate(tenant_id)
            log(f"re-saturated {rewritten} sparse vectors with the tenant's final average length")
        ok = await verify(conn, settings, target, tenant_id, samples=samples, log=log)
        if ok and not verify_only:
            checkpoint.unlink(missing_ok=True)
        return 0 if ok else 1
    finally:
        target.close()
        conn.close()


async def _copy_batch(conn: sqlite3.Connection, target: QdrantKnowledgeStore, tenant_id: str, artifacts: list) -> None:
    from services.knowledge_store.qdrant import layout

    ids = [a[0] for a in artifacts]
    marks = ",".join("?" * len(ids))
    entries = conn.execute(
        f"""SELECT e.artifact_id, e.chunk_index, e.text, e.headline, e.content_summary, e.timestamp_unix,
                   e.richness, f.title, f.body, v.vector
            FROM entries e JOIN entries_fts f ON f.rowid = e.rid JOIN entry_vectors v ON v.rid = e.rid
            WHERE e.artifact_id IN ({marks}) ORDER BY e.artifact_id, e.chunk_index""", ids).fetchall()
    by_artifact: dict[str, list] = {}
    for row in entries:
        by_artifact.setdefault(row[0], []).append(row)
    by_persona: dict[str, list[tuple[_Prepared, np.ndarray, tuple[int, int]]]] = {}
    for i, a in enumerate(artifacts):
        rows = by_artifact.get(a[0], [])
        if not rows:
            continue
        meta = ArtifactMeta(artifact_id=a[0], title=a[1], source_type=a[2], source_id=a[3], source_uri=a[4],
                            file_name=a[5], file_type=a[6], created_unix=a[7], modified_unix=a[8],
                            owners=tuple(json.loads(a[9])), tags=tuple(json.loads(a[10])), reputation_prior=a[11],
                            visibility_groups=tuple(json.loads(a[12])))
        prepared = _Prepared(meta, i, tuple(EntryRow(chunk_index=r[1], text=r[2], headline=r[3], content_summary=r[4],
                                                     timestamp_unix=r[5], richness=r[6], fts_title=r[7], fts_body=r[8])
                                            for r in rows), ())
        vectors = np.stack([np.frombuffer(r[9], np.float32) for r in rows])
        by_persona.setdefault(a[13], []).append((prepared, vectors, (a[14], a[15])))
    for persona, items in by_persona.items():
        await target._write(tenant_id, persona, [p for p, _, _ in items], np.concatenate([v for _, v, _ in items]))
        for p, _, (good, bad) in items:
            if good or bad:
                await target._call("set_payload", collection_name=target._names.artifacts, wait=True,
                                   payload={"feedback_helpful": good, "feedback_unhelpful": bad},
                                   points=[layout.artifact_point(tenant_id, p.meta.artifact_id)])


async def _copy_profiles_and_votes(conn: sqlite3.Connection, target: QdrantKnowledgeStore, tenant_id: str) -> None:
    from qdrant_client import models as qm

    from services.knowledge_store.qdrant import layout
    cols = select_columns(r[1] for r in conn.execute("PRAGMA table_info(profiles)"))  # an older table: defaults
    profiles = conn.execute(f"SELECT {cols} FROM profiles ORDER BY seq").fetchall()
    points = [qm.PointStruct(id=layout.profile_point(tenant_id, r[0], r[1], r[2]), vector={},
                             payload={"tenant_id": tenant_id, "persona_id": r[0], "name": r[1], "version": r[2],
                                      "row": list(r)}) for r in profiles]
    if points:
        await target._call("upsert", collection_name=target._names.profiles, points=points, wait=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "ranking_models" in tables:           # the models the profiles name, checked again, stored once by hash
        for (raw,) in conn.execute("SELECT model FROM ranking_models ORDER BY sha256").fetchall():
            await target.put_ranking_model(tenant_id, bytes(raw))
    votes = conn.execute("SELECT artifact_id, user_id, helpful, target, target_id, updated_unix FROM votes").fetchall()
    points = [qm.PointStruct(id=layout.vote_point(tenant_id, v[0], v[1]), vector={}, payload={
        "tenant_id": tenant_id, "artifact_id": v[0], "user_id": v[1], "helpful": bool(v[2]), "target": v[3],
        "target_id": v[4], "updated_unix": v[5]}) for v in votes]
    for start in range(0, len(points), 512):
        await target._call("upsert", collection_name=target._names.votes, points=points[start:start + 512], wait=True)
    await _copy_feedback_log(conn, target, tenant_id)


async def _copy_feedback_log(conn: sqlite3.Connection, target: QdrantKnowledgeStore, tenant_id: str) -> None:
    """The tenant's votes on federated sources and its search log (search_log.py), as the
    qdrant backend keeps them (qdrant/feedback_log.py)."""
    from qdrant_client import models as qm

    from services.knowledge_store.qdrant import layout
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}   # older: none
    votes = conn.execute("SELECT source_id, user_id, helpful, target_id, updated_unix FROM source_votes"
                         ).fetchall() if "source_votes" in tables else []
    searches = conn.execute("SELECT search_id, user_id, created_unix, query_sha256, items FROM searches"
                            ).fetchall() if "searches" in tables else []
    for collection, points in (
            (target._names.source_votes, [qm.PointStruct(
                id=layout.source_vote_point(tenant_id, v[0], v[1]), vector={}, payload={
                    "tenant_id": tenant_id, "source_id": v[0], "user_id": v[1], "helpful": bool(v[2]),
                    "target_id": v[3], "updated_unix": v[4]}) for v in votes]),
            (target._names.searches, [qm.PointStruct(
                id=layout.search_point(tenant_id, r[0]), vector={}, payload={
                    "tenant_id": tenant_id, "search_id": r[0], "user_id": r[1], "created_unix": r[2],
                    "query_sha256": r[3], "items": json.loads(r[4])}) for r in searches])):
        for start in range(0, len(points), 512):
            await target._call("upsert", collection_name=collection, points=points[start:start + 512], wait=True)


async def verify(conn: sqlite3.Connection, settings: KnowledgeStoreSettings, target: QdrantKnowledgeStore,
                 tenant_id: str, *, samples: int, log=print) -> bool:
    """Counts equal, and sample searches agree (top 10 of both legs on both stores)."""
    (artifacts,), (entries,) = (conn.execute("SELECT count(*) FROM artifacts").fetchone(),
                                conn.execute("SELECT count(*) FROM entries").fetchone())
    stats = await target.stats(tenant_id)
    ok = stats.artifacts == artifacts and stats.entries == entries
    log(f"counts: embedded {artifacts} artifacts / {entries} entries, qdrant {stats.artifacts} / {stats.entries}"
        f" {'ok' if ok else 'DIFFER'}")
    rows = conn.execute("SELECT e.headline, v.vector FROM entries e JOIN entry_vectors v ON v.rid = e.rid").fetchall()
    picks = random.Random(0).sample(rows, min(samples, len(rows)))
    source = open_store(KnowledgeStoreSettings(data_dir=settings.data_dir, dimension=settings.dimension,
                                               read_only=True), _NoEmbedder())
    try:
        agree = {"dense": 0.0, "keyword": 0.0}
        for headline, blob in picks:
            q = np.frombuffer(blob, np.float32)[None, :]
            [a], [b] = (await source.dense(tenant_id, q, 10, SearchFilters(), hits=True),
                        await target.dense(tenant_id, q, 10, SearchFilters(), hits=True))
            agree["dense"] += _overlap(a, b)
            (a, _), (b, _) = (await source.keyword(tenant_id, headline, [], 10, SearchFilters(), hits=True),
                              await target.keyword(tenant_id, headline, [], 10, SearchFilters(), hits=True))
            agree["keyword"] += _overlap(a, b)
    finally:
        source.close()
    n = max(1, len(picks))
    for leg, total in agree.items():
        log(f"sample searches, {leg}: mean top-10 overlap {total / n:.3f} over {len(picks)} queries")
    # Equal scores may order differently at the cut (the embedded store breaks ties by row id).
    return ok and agree["dense"] / n >= 0.95 and agree["keyword"] / n >= 0.9


def _overlap(a, b) -> float:
    x, y = {h.entry.id for h in a}, {h.entry.id for h in b}
    return 1.0 if not x and not y else len(x & y) / max(len(x), len(y))
