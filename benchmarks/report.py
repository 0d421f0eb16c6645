"""Write a benchmark result: `result.json` (machine-readable), `queries.jsonl` (one record per
query and method, for digging), `report.md`, and PNG plots; print a summary table.

    latency_stages.png   distribution of each pipeline stage (default method) and end to end,
                         next to the baseline's stages
    quality.png          nDCG@10 / Recall@100 / MRR@10 per ranking method and the baseline
    throughput.png       queries/s and p95 latency against concurrent clients
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks import ranking_checks
from benchmarks.tables import markdown_table

METRIC_LABELS = {"ndcg@10": "nDCG@10", "recall@100": "Recall@100", "mrr@10": "MRR@10"}
MAX_TENANT_PLOTS = 8


def write_all(result: dict, records: Sequence[dict], out_dir: Path, *, plots: bool = True) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {"json": out_dir / "result.json", "queries": out_dir / "queries.jsonl",
                              "markdown": out_dir / "report.md"}
    if plots:
        paths.update(write_plots(result, records, out_dir))
    result = {**result, "files": {k: str(v) for k, v in paths.items()}}
    _atomic_write(paths["json"], json.dumps(_finite(result), indent=2))
    _atomic_write(paths["queries"], "".join(json.dumps(_finite(r)) + "\n" for r in records))
    _atomic_write(paths["markdown"], markdown(result, {k: v.name for k, v in paths.items() if v.suffix == ".png"}))
    return paths


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _finite(value):
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# ------------------------------------------------------------------------------------ markdown
def _f(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _ms(value) -> str:
    return _f(value, 1)


def _load(host: dict) -> str:
    load = host.get("loadavg_1m") or {}
    return f"{load.get('start', '?')} at start, {load.get('end', '?')} at end"


def markdown(result: dict, images: dict[str, str]) -> str:
    run = result["run"]
    opts = run["options"]
    names = ", ".join(f"{d['name']} ({d['documents']} docs, {d['judged_queries']} judged queries, split "
                      f"{d['split']})" for d in result["datasets"])
    lines = [f"# Nucleus RAG benchmark — {names}", "",
             f"Run {run['started']} · git {run['git'] or '?'} · {run['host']['cpus']} CPUs (1-min load "
             f"{_load(run['host'])}) · "
             f"{'own stack' if result['stack']['started_here'] else 'running stack'} "
             f"({result['stack']['data_dir']}), query-embedding cache {result['stack']['query_embedding_cache']} · "
             f"top_k_initial {opts['top_k_initial']}, "
             f"top_k_final {opts['top_k_final']}", ""]

    lines += ["## Quality (document level)", "",
              "Chunks reduced to their artifact id (= BEIR `_id`) at the best rank; every judged query with "
              "a relevant document in the tenant counts (a failed query scores 0). Ratio = ours / baseline.", ""]
    baseline = result.get("baseline") or {}
    ratios = (result.get("ratios") or {}).get("quality", {})
    for tenant, per_method in result["quality"].items():
        base = (baseline.get("tenants") or {}).get(tenant)
        lines.append(f"### Tenant `{tenant}`")
        lines.append("")
        rows = []
        for method, q in per_method.items():
            r = ratios.get(tenant, {}).get(method, {})
            rows.append([method, _f(q["ndcg@10"]), _f(q["recall@100"]), _f(q["mrr@10"]),
                         _f(r.get("ndcg@10"), 2), q["queries"], q["errors"], q["degraded"], _ms(q["e2e_p50_ms"])])
        if base:
            bq = base["quality"]
            rows.append(["**baseline** (in-process)", _f(bq["ndcg@10"]), _f(bq["recall@100"]), _f(bq["mrr@10"]),
                         "1.00", base["queries"], 0, 0, _ms(base["latency"]["total"]["p50"])])
        lines += markdown_table(["method", "nDCG@10", "Recall@100", "MRR@10", "nDCG ratio", "queries", "errors",
                         "degraded", "p50 ms"], rows)
    lines += ["Methods:", ""] + [f"- `{m['name']}`: {m['description']}" for m in result["methods"]] + [""]
    if baseline:
        lines += [f"Baseline: {baseline['description']}.", ""]

    lat = result["latency"]
    lines += ["## Latency", "",
              f"Method `{lat['method']}`, one client, queries back to back. Stages from the response `timings` "
              "(server clock); end to end on the client clock (gRPC included).", ""]
    rows = [[s, v["count"], _ms(v["p50"]), _ms(v["p95"]), _ms(v["p99"]), _ms(v["mean"])]
            for s, v in lat["stages"].items()]
    rows.append(["**end to end (client)**", lat["e2e_client"]["count"], _ms(lat["e2e_client"]["p50"]),
                 _ms(lat["e2e_client"]["p95"]), _ms(lat["e2e_client"]["p99"]), _ms(lat["e2e_client"]["mean"])])
    if baseline:
        for s, v in baseline["latency_all"].items():
            rows.append([f"baseline {s}", v["count"], _ms(v["p50"]), _ms(v["p95"]), _ms(v["p99"]), _ms(v["mean"])])
    lines += markdown_table(["stage", "n", "p50 ms", "p95 ms", "p99 ms", "mean ms"], rows)
    lr = (result.get("ratios") or {}).get("latency")
    if lr:
        lines += [f"Latency ratio ours (end to end) / baseline (in-process total): p50 {_f(lr['p50'], 2)}×, "
                  f"p95 {_f(lr['p95'], 2)}×, p99 {_f(lr['p99'], 2)}×.", ""]
    rows = [[m, v["count"], _ms(v["p50"]), _ms(v["p95"]), _ms(v["p99"])] for m, v in lat["by_method"].items()]
    lines += ["End to end per method:", ""] + markdown_table(["method", "n", "p50 ms", "p95 ms", "p99 ms"], rows)

    lines += ["## Throughput", "",
              "Concurrent clients (one gRPC channel each), each sending a fixed number of queries back to back "
              "(default method, tenants round-robin).", ""]
    rows = [[t["clients"], t["clients"] * t["queries_per_client"], t["completed"], t["errors"],
             ", ".join(f"{k} {v}" for k, v in t["error_kinds"].items()) or "–", _f(t["wall_s"], 1), _f(t["qps"], 1),
             _ms(t["latency"]["p50"]), _ms(t["latency"]["p95"]), _ms(t["latency"]["p99"])]
            for t in result["throughput"]]
    lines += markdown_table(["clients", "sent", "ok", "errors", "error kinds", "wall s", "queries/s", "p50 ms",
                             "p95 ms", "p99 ms"], rows)

    lines += ["## Ingest", "", "Through KnowledgeStore.IngestDocuments (chunk, embed via LlmOrchestration, commit). "
              "Skipped documents were already in the tenant (manifest + GetTenantStats); docs/s then comes from "
              "the last run that ingested.", ""]
    rows = [[i["tenant"], i["documents"], i["ingested_now"], i["skipped"], _f(i["seconds"], 1),
             _f(i["docs_per_s"], 1) + ("" if i["measured_now"] else " (earlier run)"), i["entries"],
             _f(i["embed_seconds"], 1), _f(i["commit_seconds"], 1), i["tenant_artifacts"], i["tenant_entries"]]
            for i in result["ingest"]]
    lines += markdown_table(["tenant", "documents", "ingested now", "skipped", "seconds", "docs/s", "entries",
                     "embed s", "commit s", "artifacts", "entries stored"], rows)
    warnings = [f"- `{i['tenant']}`: {w}" for i in result["ingest"] for w in i["warnings"]]
    if warnings:
        lines += ["Warnings:", ""] + warnings + [""]

    iso = result["isolation"]
    lines += ["## Tenant isolation", "",
              f"{iso['tenants']} tenant(s); {iso['responses_checked']} responses, {iso['results_checked']} result "
              f"documents checked. Results naming a document the tenant was never given: {iso['foreign_results']}. "
              f"**Violations** (a document only another tenant of this run holds): **{iso['violations']}**.", ""]
    lines += [f"- {e}" for e in iso["examples"]] + ([""] if iso["examples"] else [])

    lines += ranking_checks.markdown(result)
    if images:
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in images.items()] + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ plots
def write_plots(result: dict, records: Sequence[dict], out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {}

    # latency per stage
    method = result["latency"]["method"]
    ours = [r for r in records if r["method"] == method and not r["error"]]
    stages = list(result["latency"]["stages"])
    series = [(s, [r["stages_ms"][s] for r in ours if s in r["stages_ms"]]) for s in stages]
    series.append(("e2e (client)", [r["e2e_ms"] for r in ours]))
    base = [r for r in records if r["method"] == "baseline"]
    if base:
        series += [(f"baseline {s}", [r["stages_ms"][s] for r in base]) for s in base[0]["stages_ms"]]
    series = [(n, v) for n, v in series if v]
    if series:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(series)), 4.5))
        ax.boxplot([v for _, v in series], whis=(1, 99), showfliers=False)
        ax.set_xticks(range(1, len(series) + 1), [n for n, _ in series], rotation=35, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("ms (log scale; whiskers p1–p99)")
        ax.set_title(f"Latency per stage — method {method}")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        paths["plot_latency"] = out_dir / "latency_stages.png"
        fig.savefig(paths["plot_latency"], dpi=110)
        plt.close(fig)

    # quality per method
    tenants = list(result["quality"])[:MAX_TENANT_PLOTS]
    if tenants:
        fig, axes = plt.subplots(len(tenants), 1, figsize=(9, 3.6 * len(tenants)), squeeze=False)
        for ax, tenant in zip(axes[:, 0], tenants):
            per_method = dict(result["quality"][tenant])
            b = ((result.get("baseline") or {}).get("tenants") or {}).get(tenant)
            if b:
                per_method["baseline"] = b["quality"]
            names = list(per_method)
            width = 0.8 / len(METRIC_LABELS)
            for j, (key, label) in enumerate(METRIC_LABELS.items()):
                ax.bar([i + (j - 1) * width for i in range(len(names))], [per_method[n][key] for n in names],
                       width, label=label)
            ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
            ax.set_ylim(0, 1)
            ax.set_title(f"Quality per method — tenant {tenant}")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        paths["plot_quality"] = out_dir / "quality.png"
        fig.savefig(paths["plot_quality"], dpi=110)
        plt.close(fig)

    # throughput vs concurrency
    tp = result["throughput"]
    if tp:
        fig, ax = plt.subplots(figsize=(6, 4))
        clients = [t["clients"] for t in tp]
        ax.plot(clients, [t["qps"] for t in tp], "o-", label="queries/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("queries/s")
        ax2 = ax.twinx()
        ax2.plot(clients, [t["latency"]["p95"] for t in tp], "s--", color="tab:red", label="p95 latency")
        ax2.set_ylabel("p95 latency, ms")
        for t in tp:
            if t["errors"]:
                ax.annotate(f"{t['errors']} errors", (t["clients"], t["qps"]), textcoords="offset points",
                            xytext=(0, 8), ha="center", fontsize=8, color="tab:red")
        ax.set_title("Throughput vs concurrency")
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        ax.legend(handles, [h.get_label() for h in handles], loc="upper center", fontsize=8)
        fig.tight_layout()
        paths["plot_throughput"] = out_dir / "throughput.png"
        fig.savefig(paths["plot_throughput"], dpi=110)
        plt.close(fig)
    return paths


# ------------------------------------------------------------------------------------ console
def print_summary(result: dict, console: Console) -> None:
    baseline = (result.get("baseline") or {}).get("tenants") or {}
    ratios = (result.get("ratios") or {}).get("quality", {})
    table = Table(title="Quality (document level)")
    for col in ("tenant", "method", "nDCG@10", "Recall@100", "MRR@10", "nDCG ours/base", "errors"):
        table.add_column(col, justify="left" if col in ("tenant", "method") else "right", no_wrap=True)
    for tenant, per_method in result["quality"].items():
        for method, q in per_method.items():
            r = ratios.get(tenant, {}).get(method, {})
            table.add_row(tenant, method, _f(q["ndcg@10"]), _f(q["recall@100"]), _f(q["mrr@10"]),
                          _f(r.get("ndcg@10"), 2), str(q["errors"]))
        if tenant in baseline:
            bq = baseline[tenant]["quality"]
            table.add_row(tenant, "[bold]baseline[/bold]", _f(bq["ndcg@10"]), _f(bq["recall@100"]),
                          _f(bq["mrr@10"]), "1.00", "0")
    console.print(table)

    lat = result["latency"]
    table = Table(title=f"Latency, ms (method {lat['method']}, 1 client)")
    for col in ("stage", "p50", "p95", "p99"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for s, v in lat["stages"].items():
        table.add_row(s, _ms(v["p50"]), _ms(v["p95"]), _ms(v["p99"]))
    e = lat["e2e_client"]
    table.add_row("[bold]end to end[/bold]", _ms(e["p50"]), _ms(e["p95"]), _ms(e["p99"]))
    if result.get("baseline"):
        b = result["baseline"]["latency_all"]["total"]
        table.add_row("[bold]baseline total[/bold]", _ms(b["p50"]), _ms(b["p95"]), _ms(b["p99"]))
        lr = result["ratios"]["latency"]
        table.add_row("ours / baseline", *(f"{_f(lr[p], 2)}×" for p in ("p50", "p95", "p99")))
    console.print(table)

    table = Table(title="Throughput")
    for col in ("clients", "ok", "errors", "queries/s", "p50 ms", "p95 ms"):
        table.add_column(col, justify="right")
    for t in result["throughput"]:
        table.add_row(str(t["clients"]), str(t["completed"]), str(t["errors"]), _f(t["qps"], 1),
                      _ms(t["latency"]["p50"]), _ms(t["latency"]["p95"]))
    console.print(table)

    for i in result["ingest"]:
        rate = _f(i["docs_per_s"], 1) if i["docs_per_s"] else "–"
        console.print(f"ingest {i['tenant']}: {i['documents']} documents ({i['ingested_now']} now, {i['skipped']} "
                      f"skipped), {rate} docs/s{'' if i['measured_now'] else ' (earlier run)'}")
    checks = result.get("ranking_checks") or {}
    if checks.get("targets"):
        table = Table(title="Quality targets")
        for col in ("tenant", "target", "value", "threshold", ""):
            table.add_column(col, justify="left" if col in ("tenant", "target") else "right")
        for t in checks["targets"]:
            table.add_row(t["tenant"], t["target"], _f(t["value"]), f"{t['comparison']} {t['threshold']:g}",
                          "[green]met[/green]" if t["met"] else "[red]missed[/red]")
        console.print(table)
    cost = checks.get("completion_cost")
    if cost:
        total = cost["ms"]["total"]
        console.print(f"score completion costs {_f(total['p50'], 2)} ms p50 / {_f(total['p95'], 2)} ms p95 per query "
                      f"({cost['queries']} queries, top_k {cost['top_k']})")
    iso = result["isolation"]
    colour = "green" if iso["violations"] == 0 else "red"
    console.print(f"isolation: [{colour}]{iso['violations']} violations[/{colour}] over {iso['responses_checked']} "
                  f"responses ({iso['tenants']} tenants)")
