"""The result document of a `nucleus bench` run (`result.json`): what ran, on what, and every
figure per tenant and method, assembled from the phases of benchmarks/harness.py."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.beir import BeirDataset
from benchmarks.metrics import evaluate, latency_summary
from benchmarks.options import BenchOptions, TenantRun
from benchmarks.stack import Stack

if TYPE_CHECKING:
    from benchmarks.queries import Method

ROOT = Path(__file__).resolve().parent.parent


def assemble(options: BenchOptions, started: float, revision: str, datasets: list[BeirDataset], stack: Stack,
              runs: list[TenantRun], methods: list[Method], service: dict, baseline: dict | None) -> dict:
    quality: dict[str, dict] = {}
    for run in runs:
        qrels = run.plan.qrels()
        qids = [q for q, _ in run.queries]
        quality[run.plan.tenant] = {}
        for method in methods:
            records = run.records[method.name]
            ranking = {r.query_id: r.doc_ids for r in records if not r.error}
            means, _ = evaluate(ranking, qrels, qids)
            quality[run.plan.tenant][method.name] = {
                **means, "queries": len(qids), "errors": sum(1 for r in records if r.error),
                "degraded": sum(1 for r in records if r.degraded),
                "e2e_p50_ms": latency_summary([r.e2e_ms for r in records if not r.error])["p50"]}

    default = [r for run in runs for r in run.records[methods[0].name] if not r.error]
    stage_names = list(dict.fromkeys(s for r in default for s in r.stages_ms))
    latency = {
        "method": methods[0].name,
        "stages": {s: latency_summary([r.stages_ms[s] for r in default if s in r.stages_ms]) for s in stage_names},
        "e2e_client": latency_summary([r.e2e_ms for r in default]),
        "by_method": {m.name: latency_summary([r.e2e_ms for run in runs for r in run.records[m.name] if not r.error])
                      for m in methods},
    }
    throughput = [{**{k: v for k, v in asdict(t).items() if k != "latencies_ms"},
                   "latency": latency_summary(t.latencies_ms)} for t in service["throughput"]]

    ratios = None
    if baseline is not None:
        ratios = {"quality": {}, "latency": {}}
        for tenant, per_method in quality.items():
            base = baseline["tenants"][tenant]["quality"]
            ratios["quality"][tenant] = {m: {k: _ratio(v[k], base[k]) for k in base} for m, v in per_method.items()}
        base_total = baseline["latency_all"]["total"]
        for p in ("p50", "p95", "p99"):
            ratios["latency"][p] = _ratio(latency["e2e_client"][p], base_total[p])

    isolation = service["isolation"].to_json()
    isolation["tenants"] = len(runs)
    return {
        "benchmark": "nucleus bench",
        "run": {"started_unix": int(started), "finished_unix": int(time.time()),
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                "git": revision, "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                                                  "python": platform.python_version()},
                "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()
                            if k not in ("datasets",)} | {"datasets": [str(d) for d in options.datasets]}},
        "datasets": [{"name": d.name, "root": str(d.root), "split": d.split, "fingerprint": d.fingerprint,
                      "documents": len(d.corpus), "queries": len(d.queries),
                      "judged_queries": len(d.evaluated_query_ids)} for d in {id(d): d for d in datasets}.values()],
        "stack": {"started_here": stack.started_here, "data_dir": str(stack.data_dir),
                  "query_embedding_cache": stack.query_cache,
                  "services": {n: s.get("grpc", "") for n, s in stack.services.items()}},
        "tenants": [{"tenant": r.plan.tenant, "dataset": r.plan.dataset.name, "documents": len(r.plan.rows),
                     "queries": len(r.queries)} for r in runs],
        "methods": [{"name": m.name, "profile": m.profile_name, "description": m.description} for m in methods],
        "ingest": [o.to_json() for o in service["ingest"]],
        "quality": quality,
        "latency": latency,
        "throughput": throughput,
        "isolation": isolation,
        "baseline": baseline,
        "ratios": ratios,
    }


def loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _ratio(ours: float, base: float) -> float | None:
    return ours / base if base else None


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else ""
    except (OSError, subprocess.SubprocessError):
        return ""
