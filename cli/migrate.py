"""`nucleus migrate --to qdrant|embedded --tenant T`: move tenants between the two backends.

    nucleus migrate --to qdrant --tenant acme --qdrant-url http://qdrant:6333
    nucleus migrate --to qdrant --tenant acme --tenant globex --qdrant-path ./qdrant-data   # local mode
    nucleus migrate --to embedded --tenant acme --data-dir .nucleus-data/knowledge_store --qdrant-url URL
    nucleus migrate --to qdrant --tenant acme --verify-only
    nucleus migrate --to qdrant --tenant acme --recount       # Qdrant side only: see below

Each tenant moves as a tenant archive (services/knowledge_store/archive.py, the format of
`nucleus tenant export` / `import`): exported from the other backend through its read primitives
into an archive file in the embedded store's data directory (`.migrate-*`, 0600, MAC'd with a
key of this run, removed after), verified, then imported into the target through the target's
all-or-nothing import (`import_archive`: the embedded store builds the tenant aside and swaps it
in; Qdrant writes a new generation of the tenant, re-saturates it and switches it in) with the
stored vectors (nothing is re-embedded) and the tenant's model fingerprint, then verified. The
stores are opened here, not through a running KnowledgeStore: the source read-only; an embedded
target needs its data directory to itself (stop the KnowledgeStore that owns it), as does Qdrant's local mode.

Resumable per tenant: the state of each tenant (`importing`, then `verified`) is kept in
`migrate-to-<backend>.json` in the embedded data directory. A rerun skips a verified tenant; a
tenant whose import an interruption (^C, kill -9) cut short is imported again, replacing the
tenant: the swap (embedded) or the generation switch (Qdrant) had not happened, and the points of
a Qdrant generation written part-way are deleted by the next import. `--restart` imports the
named tenants again even when verified.

Verified at the end (and alone with `--verify-only`, either direction): both stores' archive
records agree — the same counts of artifacts, entries, profile versions, personas and user data
records, the same SHA-256 over every artifact record without its vectors (ids, texts, metadata,
analysed terms, feedback counters) and every user data record, and every vector within
VECTOR_TOLERANCE (Qdrant re-normalises on upsert) — and sample searches (stored vectors as dense
queries, stored headlines as keyword queries) return the same top 10 on both (mean overlap:
dense >= 0.95, keyword >= 0.9; equal scores may order differently at the cut). Exit 0 when
every tenant agrees, 1 if not.

User data moves too (the same tenant id): each user's votes, the search log, the votes on
federated sources, the vote log (every vote with its comment and the search it named) and the
votes that named a search; verified by their counts and a SHA-256 over their records, which both
backends give in one canonical form (archive_file.py `vote_log`).

`--recount` touches only the Qdrant side: it recounts the tenant's term statistics from its
entries and re-saturates their sparse vectors with the current average length (after
concurrent writers to one tenant let the statistics drift: docs/SCALE.md).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
from pathlib import Path

import numpy as np

from services.knowledge_store.archive import export_records, import_archive
from services.knowledge_store.archive_file import USER_KINDS, open_archive, scratch, write_archive
from services.knowledge_store.backend import StoreBackend, open_store
from shared.errors import FailedPrecondition
from shared.records import SearchFilters
from shared.settings import KnowledgeStoreSettings

VECTOR_TOLERANCE = 1e-5
OTHER = {"qdrant": "embedded", "embedded": "qdrant"}


class _NoEmbedder:
    async def embed(self, texts: list[str]) -> np.ndarray:     # the stored vectors are moved instead
        raise FailedPrecondition("migrate moves stored vectors; nothing is embedded")

    async def model_name(self) -> str:
        return ""


def register(subparsers) -> None:
    p = subparsers.add_parser("migrate", help="move tenants between the embedded store and Qdrant, either way "
                                              "(as tenant archives; resumable, verified)")
    p.add_argument("--to", choices=["qdrant", "embedded"], required=True)
    p.add_argument("--tenant", required=True, action="append", help="a tenant to move (repeat for more)")
    p.add_argument("--data-dir", "--from-data-dir", dest="data_dir", type=Path,
                   help="the embedded store's data directory (default: NUCLEUS_KS_DATA_DIR or "
                        "<data-dir>/knowledge_store)")
    p.add_argument("--qdrant-url", default=None, help="default NUCLEUS_QDRANT_URL")
    p.add_argument("--qdrant-path", type=Path, default=None, help="local mode folder (default NUCLEUS_QDRANT_PATH)")
    p.add_argument("--samples", type=int, default=20, help="sample searches of the verification (default 20)")
    p.add_argument("--restart", action="store_true", help="import the tenants again even if an earlier run "
                                                          "verified them")
    p.add_argument("--verify-only", action="store_true")
    p.add_argument("--recount", action="store_true",
                   help="only recount the tenant's term statistics in Qdrant and re-saturate its vectors")
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    overrides: dict[str, object] = {}
    if args.data_dir:
        overrides["data_dir"] = args.data_dir
    if args.qdrant_url:
        overrides["qdrant_url"] = args.qdrant_url
    if args.qdrant_path:
        overrides["qdrant_path"] = args.qdrant_path
    settings = KnowledgeStoreSettings(**overrides)
    if args.recount:
        if args.to != "qdrant":
            raise FailedPrecondition("--recount recounts a tenant in Qdrant: pass --to qdrant")
        return max(asyncio.run(recount(settings, t)) for t in args.tenant)
    return asyncio.run(migrate(settings, args.to, args.tenant, samples=args.samples, restart=args.restart,
                               verify_only=args.verify_only))


async def recount(settings: KnowledgeStoreSettings, tenant_id: str, log=print) -> int:
    from services.knowledge_store.qdrant import QdrantKnowledgeStore

    store = QdrantKnowledgeStore(settings.model_copy(update={"backend": "qdrant"}), _NoEmbedder())
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


class _State:
    """Each tenant's progress (module docstring), rewritten whole after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tenants: dict[str, str] = json.loads(path.read_text())["tenants"] if path.exists() else {}

    def set(self, tenant_id: str, state: str) -> None:
        self.tenants[tenant_id] = state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"tenants": self.tenants}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def _open(settings: KnowledgeStoreSettings, backend: str, *, read_only: bool) -> StoreBackend:
    update: dict[str, object] = {"backend": backend}
    if read_only and backend == "embedded":
        update["read_only"] = True
    return open_store(settings.model_copy(update=update), _NoEmbedder())


async def migrate(settings: KnowledgeStoreSettings, to: str, tenants: list[str], *, samples: int = 20,
                  restart: bool = False, verify_only: bool = False, log=print) -> int:
    """Move `tenants` into the `to` backend from the other (module docstring); 0 when all agree."""
    state = _State(Path(settings.data_dir) / f"migrate-to-{to}.json")
    source = _open(settings, OTHER[to], read_only=True)
    target = _open(settings, to, read_only=verify_only)
    try:
        failed = []
        for tenant_id in tenants:
            if verify_only:
                ok = await verify(source, target, tenant_id, samples=samples, log=log)
            else:
                ok = await _move(settings, source, target, to, tenant_id, state, samples=samples, restart=restart,
                                 log=log)
            if not ok:
                failed.append(tenant_id)
        if failed:
            log(f"DIFFER: {', '.join(failed)}")
        return 1 if failed else 0
    finally:
        target.close()
        source.close()


async def _move(settings: KnowledgeStoreSettings, source: StoreBackend, target: StoreBackend, to: str,
                tenant_id: str, state: _State, *, samples: int, restart: bool, log) -> bool:
    was = state.tenants.get(tenant_id)
    if was == "verified" and not restart:
        log(f"tenant {tenant_id}: moved and verified by an earlier run, skipped")
        return True
    again = was is not None
    if again:
        log(f"tenant {tenant_id}: {'an earlier run stopped during its import' if was == 'importing' else 'restart'}"
            f": importing it again")
    key = os.urandom(32)
    model = {"name": "", "dimension": source.dimension, "fingerprint": await source.tenant_fingerprint(tenant_id)}
    with scratch(Path(settings.data_dir), f"migrate-{to}") as path:
        path.unlink(missing_ok=True)
        manifest = await write_archive(path, key, tenant_id, model, export_records(source, tenant_id))
        log(f"tenant {tenant_id}: exported {manifest['counts']['artifact']} artifacts, {manifest['counts']['profile']}"
            f" profile versions, {manifest['counts']['persona']} personas from {OTHER[to]}")
        archive = open_archive(path, key)
        state.set(tenant_id, "importing")
        report = await import_archive(target, archive, tenant_id, {**model, "dimension": target.dimension},
                                      replace_tenant=again, keep_groups=True)
    log(f"tenant {tenant_id}: imported {report.artifacts} artifacts, {report.entries} entries into {to}")
    ok = await verify(source, target, tenant_id, samples=samples, log=log)
    if ok:
        state.set(tenant_id, "verified")
    return ok


def _split(record: dict) -> tuple[bytes, list[np.ndarray]]:
    """(the artifact record without its vectors as canonical JSON, its vectors)."""
    vectors = [e["vector"] for e in record["entries"]] + ([record["title_vector"]] if record["title_vector"] else [])
    bare = {**record, "title_vector": bool(record["title_vector"]),
            "entries": [{k: v for k, v in e.items() if k != "vector"} for e in record["entries"]]}
    return (json.dumps(bare, sort_keys=True, separators=(",", ":")).encode(),
            [np.frombuffer(base64.b64decode(v), "<f4") for v in vectors])


class _Side:
    """One store's archive records summed up: counts, profile and persona keys, the SHA-256 of
    the artifact records without their vectors."""

    def __init__(self) -> None:
        self.counts = {"artifact": 0, "entries": 0}
        self.user = dict.fromkeys(USER_KINDS, 0)
        self.profiles: set[tuple] = set()
        self.personas: set[str] = set()
        self.sha = hashlib.sha256()

    def add(self, record: dict | None) -> list[np.ndarray] | None:
        """Count `record`; an artifact's vectors (None for other records)."""
        if record is None:
            return None
        if record["kind"] == "profile":
            p = record["profile"]
            self.profiles.add((p["persona_id"], p["name"], p["version"]))
        elif record["kind"] == "persona":
            self.personas.add(record["persona"]["persona_id"])
        elif record["kind"] in USER_KINDS:
            self.user[record["kind"]] += 1
            self.sha.update(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())
        else:
            self.counts["artifact"] += 1
            self.counts["entries"] += len(record["entries"])
            bare, vectors = _split(record)
            self.sha.update(bare)
            return vectors
        return None

    def summary(self) -> dict:
        return {**self.counts, "profile": len(self.profiles), "persona": len(self.personas), **self.user}


async def verify(source: StoreBackend, target: StoreBackend, tenant_id: str, *, samples: int, log=print) -> bool:
    """The tenant's archive records and sample searches agree on both stores (module docstring):
    both read in step, artifact by artifact in id order."""
    a, b = _Side(), _Side()
    left, right = export_records(source, tenant_id), export_records(target, tenant_id)
    diff, paired = 0.0, True
    picks: list = []
    rng, seen = random.Random(0), 0
    while True:
        x, y = await anext(left, None), await anext(right, None)
        if x is None and y is None:
            break
        vx, vy = a.add(x), b.add(y)
        if vx is not None and vy is not None and len(vx) == len(vy):
            diff = max([diff] + [float(np.max(np.abs(p - q))) for p, q in zip(vx, vy)])
        elif vx is not None or vy is not None:
            paired = False                     # records out of step: the counts or the hash tell why
        for e in x["entries"] if vx is not None else ():     # reservoir sampling of the sample queries
            seen += 1
            slot = len(picks) if len(picks) < samples else rng.randrange(seen)
            if slot < samples:
                picks[slot:slot + 1] = [(e["headline"], np.frombuffer(base64.b64decode(e["vector"]), "<f4")[None, :])]
    same = a.sha.digest() == b.sha.digest()
    ok = (a.summary() == b.summary() and (a.profiles, a.personas) == (b.profiles, b.personas) and same and paired
          and diff <= VECTOR_TOLERANCE)
    c, d = a.summary(), b.summary()
    log(f"tenant {tenant_id}: counts {c['artifact']} artifacts / {c['entries']} entries / {c['profile']} profile "
        f"versions / {c['persona']} personas, target {d['artifact']} / {d['entries']} / {d['profile']} / "
        f"{d['persona']}; records SHA-256 {'equal' if same else 'DIFFER'}; vectors max difference {diff:.1e}; "
        f"user data {c['vote']} votes / {c['search']} searches / {c['source_vote']} source votes / {c['feedback']} "
        f"logged votes / {c['search_vote']} search votes, target {d['vote']} / {d['search']} / {d['source_vote']} / "
        f"{d['feedback']} / {d['search_vote']}: {'ok' if ok else 'DIFFER'}")
    agree = {"dense": 0.0, "keyword": 0.0}
    for headline, q in picks:
        [x], [y] = (await source.dense(tenant_id, q, 10, SearchFilters(), hits=True),
                    await target.dense(tenant_id, q, 10, SearchFilters(), hits=True))
        agree["dense"] += _overlap(x, y)
        (x, _), (y, _) = (await source.keyword(tenant_id, headline, [], 10, SearchFilters(), hits=True),
                          await target.keyword(tenant_id, headline, [], 10, SearchFilters(), hits=True))
        agree["keyword"] += _overlap(x, y)
    n = max(1, len(picks))
    for leg, total in agree.items():
        log(f"tenant {tenant_id}: sample searches, {leg}: mean top-10 overlap {total / n:.3f} over {len(picks)} "
            "queries")
    # Equal scores may order differently at the cut (the embedded store breaks ties by row id).
    return ok and agree["dense"] / n >= 0.95 and agree["keyword"] / n >= 0.9


def _overlap(a, b) -> float:
    x, y = {h.entry.id for h in a}, {h.entry.id for h in b}
    return 1.0 if not x and not y else len(x & y) / max(len(x), len(y))
