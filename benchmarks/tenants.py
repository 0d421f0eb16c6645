"""Which documents go into which tenant, and ingesting them through the real KnowledgeStore
once: a manifest per tenant records what is already in, so re-runs skip the work.

Slicing: with `slices = N > 1`, corpus row i goes to tenant `<tenant>-s<i mod N + 1>of<N>`
(interleaved, so slices are the same size and deterministic). With N = 1 the tenant holds the
whole corpus under its own name.

Manifest `<stack data dir>/bench/<tenant>.json` (next to the data it describes, so wiping the
data wipes it too): corpus fingerprint, the ids ingested so far (appended after every batch, so
an interrupted ingest resumes), and the last ingest measurement. It is trusted only when the
fingerprint matches and the tenant's artifact count (GetTenantStats) agrees with it; documents
the manifest lists but the plan no longer wants are deleted from the tenant.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.beir import BeirDataset
from shared.records import ArtifactMeta, DocumentIn
from services.knowledge_store.validation import tenant_id as check_tenant_id
from shared.errors import InvalidArgument, NotFound

SOURCE_TYPE = "beir"
DELETE_BATCH = 500


@dataclass(frozen=True)
class TenantPlan:
    tenant: str
    dataset: BeirDataset
    rows: tuple[int, ...]            # corpus rows held by this tenant

    @property
    def doc_ids(self) -> list[str]:
        return [self.dataset.corpus[r].id for r in self.rows]

    @property
    def query_ids(self) -> list[str]:
        """Judged queries with at least one relevant document in this tenant."""
        held = set(self.doc_ids)
        return [q for q in self.dataset.evaluated_query_ids
                if any(r > 0 and d in held for d, r in self.dataset.qrels[q].items())]

    def qrels(self) -> dict[str, dict[str, int]]:
        """The dataset's qrels restricted to documents this tenant holds."""
        held = set(self.doc_ids)
        return {q: {d: r for d, r in rels.items() if d in held} for q, rels in self.dataset.qrels.items()}


def plan_tenants(pairs: list[tuple[BeirDataset, str]], slices: int) -> list[TenantPlan]:
    if slices < 1:
        raise InvalidArgument("--tenant-slices", f"must be >= 1, got {slices}")
    plans: list[TenantPlan] = []
    for dataset, tenant in pairs:
        n = len(dataset.corpus)
        if slices > n:
            raise InvalidArgument("--tenant-slices", f"{slices} slices for {n} documents in {dataset.root}")
        if slices == 1:
            plans.append(TenantPlan(tenant, dataset, tuple(range(n))))
        else:
            plans += [TenantPlan(f"{tenant}-s{i + 1}of{slices}", dataset, tuple(range(i, n, slices)))
                      for i in range(slices)]
    seen: set[str] = set()
    for plan in plans:
        try:
            check_tenant_id(plan.tenant)
        except InvalidArgument:
            raise InvalidArgument("--tenant", f"{plan.tenant!r} is not a tenant id: 1-64 characters, letters, "
                                              "digits, '_', '.', '-', starting with a letter or digit") from None
        if plan.tenant in seen:
            raise InvalidArgument("--tenant", f"tenant {plan.tenant!r} is named twice; each dataset needs its own")
        seen.add(plan.tenant)
    return plans


def document_for(dataset: BeirDataset, row: int) -> DocumentIn:
    doc = dataset.corpus[row]
    meta = ArtifactMeta(artifact_id=doc.id, title=doc.title.strip(), source_type=SOURCE_TYPE,
                        source_id=dataset.name, file_type="txt")
    content = doc.text if doc.text.strip() else doc.title
    return DocumentIn(artifact=meta, content=content, content_type="text/plain")


@dataclass
class IngestOutcome:
    tenant: str
    documents: int              # documents the tenant should hold
    ingested_now: int           # documents sent in this run
    skipped: int                # documents already present (manifest + stats agree)
    deleted_stale: int
    seconds: float              # wall time of this run's ingest (0 when all skipped)
    entries: int                # entries written in this run
    embed_seconds: float
    commit_seconds: float
    docs_per_s: float | None    # this run's rate, else the manifest's last measurement
    measured_now: bool
    tenant_artifacts: int       # GetTenantStats after the ingest
    tenant_entries: int
    warnings: list[str]

    def to_json(self) -> dict:
        return dict(self.__dict__)


class Manifest:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {}
        if path.is_file():
            try:
                self.data = json.loads(path.read_text())
            except ValueError:
                self.data = {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        os.replace(tmp, self.path)


async def ingest_plan(client, plan: TenantPlan, manifest_dir: Path, *, batch: int = 64, force: bool = False,
                      progress: Callable[[int, int], None] | None = None) -> IngestOutcome:
    """Bring `plan.tenant` to hold exactly `plan`'s documents, sending only what is missing."""
    manifest = Manifest(manifest_dir / f"{plan.tenant}.json")
    wanted = plan.doc_ids
    wanted_set = set(wanted)
    warnings: list[str] = []
    try:
        stats = await client.stats(plan.tenant)
        artifacts = stats.artifacts
    except NotFound:
        artifacts = 0

    listed = manifest.data.get("doc_ids", []) if manifest.data.get("fingerprint") == plan.dataset.fingerprint else []
    stale = [d for d in manifest.data.get("doc_ids", []) if d not in wanted_set]
    deleted = 0
    if stale and artifacts:
        for i in range(0, len(stale), DELETE_BATCH):
            n, _ = await client.delete(plan.tenant, stale[i:i + DELETE_BATCH])
            deleted += n
        artifacts -= deleted
    done = [d for d in listed if d in wanted_set]
    if force or artifacts != len(done):
        if done and not force:
            warnings.append(f"manifest lists {len(done)} documents but the tenant holds {artifacts}; re-ingesting")
        done = []
    manifest.data = {"tenant": plan.tenant, "dataset": plan.dataset.name, "fingerprint": plan.dataset.fingerprint,
                     "doc_ids": list(done), "last_measurement": manifest.data.get("last_measurement")}
    manifest.save()

    done_set = set(done)
    todo = [r for r in plan.rows if plan.dataset.corpus[r].id not in done_set]
    entries = 0
    embed_s = commit_s = 0.0
    started = time.perf_counter()
    if progress is not None:
        progress(len(done), len(wanted))
    for i in range(0, len(todo), batch):
        rows = todo[i:i + batch]
        report = await client.ingest(plan.tenant, "", [document_for(plan.dataset, r) for r in rows])
        entries += report.total_entries
        embed_s += report.embed_seconds
        commit_s += report.commit_seconds
        manifest.data["doc_ids"] += [plan.dataset.corpus[r].id for r in rows]
        manifest.save()
        if progress is not None:
            progress(len(done) + i + len(rows), len(wanted))
    seconds = time.perf_counter() - started if todo else 0.0
    if todo:
        manifest.data["last_measurement"] = {"documents": len(todo), "seconds": seconds, "entries": entries,
                                             "embed_seconds": embed_s, "commit_seconds": commit_s,
                                             "unix": int(time.time())}
        manifest.save()
    last = manifest.data.get("last_measurement") or {}
    rate = (last["documents"] / last["seconds"]) if last.get("seconds") else None

    stats = await client.stats(plan.tenant)
    if stats.artifacts != len(wanted):
        warnings.append(f"tenant holds {stats.artifacts} artifacts, expected {len(wanted)}")
    return IngestOutcome(
        tenant=plan.tenant, documents=len(wanted), ingested_now=len(todo), skipped=len(wanted) - len(todo),
        deleted_stale=deleted, seconds=seconds, entries=entries if todo else last.get("entries", 0),
        embed_seconds=embed_s if todo else last.get("embed_seconds", 0.0),
        commit_seconds=commit_s if todo else last.get("commit_seconds", 0.0),
        docs_per_s=rate, measured_now=bool(todo), tenant_artifacts=stats.artifacts, tenant_entries=stats.entries,
        warnings=warnings)
