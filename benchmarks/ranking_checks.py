"""The ranking checks `nucleus bench` reports beside nDCG, and the quality targets they meet.

    needles      the needle set (benchmarks/needles.py) of each tenant through SearchAndRank with
                 the default method, and through the in-process baseline: hit@1 / hit@5
    split        quality of every method and of the baseline on the committed query split
                 (benchmarks/splits.py): the tuning half, the held-out half and all queries
    calibration  reliability table and expected calibration error (benchmarks/calibration.py)
                 of the default method's relevance probability, and of its Relevancy factor,
                 over the top-10 judged pairs, per split part
    targets      needle hit@5 >= 0.99 on every tenant; default nDCG@10 >= baseline + 0.01 on the
                 held-out half (all judged queries when there is no split); ECE <= 0.1 on the
                 held-out half

Targets are reported (result.json, report.md, the console) and set the exit code only with
`--fail-on-targets`: a quality threshold is a property of a dataset, not of the build.
"""
from __future__ import annotations

from collections.abc import Sequence

from benchmarks import needles as needles_mod
from benchmarks.calibration import TARGET as ECE_TARGET
from benchmarks.calibration import expected_calibration_error, judged_pairs, reliability
from benchmarks.metrics import evaluate
from benchmarks.queries import Method, QueryRecord, RagClient, run_sequential
from benchmarks.splits import QuerySplit
from benchmarks.tables import markdown_table

NEEDLE_TARGET = 0.99
BASELINE_NEEDLES = "baseline-needles"      # method name of the baseline's needle records
NDCG_MARGIN = 0.01
MOONSHOT_NDCG = 0.745


async def run_needles(client: RagClient, method: Method, needles_by_tenant: dict[str, list[needles_mod.Needle]],
                      progress=None) -> dict[str, list[QueryRecord]]:
    """Every tenant's needles through SearchAndRank with `method` (the default)."""
    out = {}
    for tenant, needle_list in needles_by_tenant.items():
        records = await run_sequential(client, tenant, method, [(n.id, n.query) for n in needle_list], progress)
        for r in records:
            r.method = "needles"
        out[tenant] = records
    return out


def assemble(runs, service_needles: dict[str, list[QueryRecord]], needles_by_tenant: dict[str, list],
             baseline_records: Sequence[QueryRecord] | None, splits: dict[str, tuple[QuerySplit | None, str]],
             completion_cost: dict | None) -> dict:
    """The `ranking_checks` section of result.json (module docstring)."""
    tenants = {}
    base_rankings: dict[tuple[str, str], dict[str, list[str]]] = {}      # (tenant, method) -> rankings
    for r in baseline_records or ():
        base_rankings.setdefault((r.tenant, r.method), {})[r.query_id] = r.doc_ids
    for run in runs:
        tenant, plan = run.plan.tenant, run.plan
        split, split_file = splits.get(plan.dataset.fingerprint, (None, ""))
        parts = split_parts([q for q, _ in run.queries], split)
        qrels = plan.qrels()
        methods = {m: {r.query_id: r.doc_ids for r in recs if not r.error} for m, recs in run.records.items()}
        if (tenant, "baseline") in base_rankings:
            methods["baseline"] = base_rankings[(tenant, "baseline")]
        entry = {"split_file": split_file,
                 "split": {m: split_quality(rk, qrels, parts) for m, rk in methods.items()},
                 "calibration": calibration(run.records.get("default", []), qrels, parts)}
        needle_list = needles_by_tenant.get(tenant, [])
        if needle_list:
            entry["needles"] = needle_summary({r.query_id: r.doc_ids for r in service_needles.get(tenant, [])
                                               if not r.error}, needle_list)
            base = base_rankings.get((tenant, BASELINE_NEEDLES))
            if base:
                entry["baseline_needles"] = needle_summary(base, needle_list)
        tenants[tenant] = entry
    return {"tenants": tenants, "completion_cost": completion_cost, "targets": targets(tenants)}


def needle_set(plan, tokens: int, phrases: int) -> list[needles_mod.Needle]:
    """The needles of one tenant, drawn from the documents it holds."""
    docs = [plan.dataset.corpus[r] for r in plan.rows]
    return needles_mod.generate([d.id for d in docs], [d.title for d in docs], [d.text for d in docs],
                                tokens=tokens, phrases=phrases)


def needle_summary(rankings: dict[str, list[str]], needles: Sequence[needles_mod.Needle]) -> dict:
    """hit@1 / hit@5 per kind and overall from each needle's document ranking."""
    hits = {n.id: needles_mod.hits(rankings.get(n.id, []), n.doc_id) for n in needles}
    return needles_mod.summarise(hits, needles)


def split_parts(query_ids: list[str], split: QuerySplit | None) -> dict[str, list[str]]:
    return split.parts(query_ids) if split else {"all": list(query_ids)}


def split_quality(rankings: dict[str, list[str]], qrels: dict, parts: dict[str, list[str]]) -> dict[str, dict]:
    """{part: mean metrics} of one method's rankings."""
    return {part: evaluate(rankings, qrels, qids)[0] for part, qids in parts.items()}


def calibration(records: Sequence[QueryRecord], qrels: dict, parts: dict[str, list[str]]) -> dict:
    """{part: {"probability": {...}, "relevancy": {...}}} with the ECE, the pairs and the
    reliability table of each score over the top-10 judged pairs."""
    by_query = {r.query_id: r for r in records if not r.error}
    out = {}
    for part, qids in parts.items():
        entry = {}
        for score in ("probability", "relevancy"):
            pairs = [p for q in qids if q in by_query
                     for p in judged_pairs(by_query[q].doc_ids, getattr(by_query[q], score), qrels.get(q, {}))]
            scores, labels = [s for s, _ in pairs], [y for _, y in pairs]
            entry[score] = {"ece": expected_calibration_error(scores, labels), "pairs": len(pairs),
                            "relevant": sum(labels), "table": reliability(scores, labels)}
        out[part] = entry
    return out


def targets(tenant_results: dict[str, dict]) -> list[dict]:
    """One row per (tenant, target): name, value, threshold, met."""
    rows = []
    for tenant, r in tenant_results.items():
        needles = (r.get("needles") or {}).get("all")
        if needles:
            rows.append(_row(tenant, "needle hit@5 (default)", needles["hit@5"], NEEDLE_TARGET))
        split = r.get("split") or {}
        part = "heldout" if "heldout" in split.get("default", {}) else "all"
        base = (split.get("baseline") or {}).get(part)
        ours = split.get("default", {}).get(part)
        if base and ours:
            rows.append(_row(tenant, f"nDCG@10 default - baseline ({part})", ours["ndcg@10"] - base["ndcg@10"],
                             NDCG_MARGIN))
        if ours and "all" in split.get("default", {}):
            rows.append(_row(tenant, "nDCG@10 default (all, moonshot)", split["default"]["all"]["ndcg@10"],
                             MOONSHOT_NDCG))
        cal = (r.get("calibration") or {}).get(part, {}).get("probability")
        if cal and cal["pairs"]:
            rows.append(_row(tenant, f"ECE relevance probability ({part})", cal["ece"], ECE_TARGET, below=True))
    return rows


def _row(tenant: str, name: str, value: float, threshold: float, *, below: bool = False) -> dict:
    return {"tenant": tenant, "target": name, "value": value, "threshold": threshold,
            "comparison": "<=" if below else ">=", "met": value <= threshold if below else value >= threshold}


def markdown(result: dict) -> list[str]:
    """The report sections of these checks."""
    checks = result.get("ranking_checks") or {}
    lines: list[str] = []
    for tenant, r in (checks.get("tenants") or {}).items():
        split = r.get("split") or {}
        if split:
            parts = list(next(iter(split.values())))
            lines += [f"### Tenant `{tenant}`: quality on the query split", "",
                      f"Split: {r.get('split_file') or 'none (all judged queries)'}. "
                      "nDCG@10 / Recall@100 per part.", ""]
            rows = [[m] + [f"{split[m][p]['ndcg@10']:.3f} / {split[m][p]['recall@100']:.3f}" for p in parts]
                    for m in split]
            lines += markdown_table(["method"] + parts, rows)
        n = r.get("needles")
        if n:
            base = r.get("baseline_needles") or {}
            rows = [[k, v["needles"], f"{v['hit@1']:.3f}", f"{v['hit@5']:.3f}",
                     f"{base[k]['hit@1']:.3f} / {base[k]['hit@5']:.3f}" if k in base else "–"] for k, v in n.items()]
            lines += [f"### Tenant `{tenant}`: needle set (default method)", ""]
            lines += markdown_table(["kind", "needles", "hit@1", "hit@5", "baseline hit@1 / hit@5"], rows)
        cal = r.get("calibration")
        if cal:
            lines += [f"### Tenant `{tenant}`: calibration (default method, top-10 judged pairs)", ""]
            rows = [[p, s, c[s]["pairs"], c[s]["relevant"], f"{c[s]['ece']:.3f}"] for p, c in cal.items() for s in c]
            lines += markdown_table(["part", "score", "pairs", "relevant", "ECE"], rows)
            part = "heldout" if "heldout" in cal else "all"
            rows = [[f"{t['lo']:.1f}–{t['hi']:.1f}", t["pairs"], f"{t['mean_score']:.3f}", f"{t['relevant']:.3f}"]
                    for t in cal[part]["probability"]["table"]]
            lines += [f"Reliability of the relevance probability ({part}):", ""]
            lines += markdown_table(["probability", "pairs", "mean probability", "share relevant"], rows)
    cost = checks.get("completion_cost")
    if cost:
        lines += ["### Score completion: latency cost (same run, agent-sized)", "", cost["description"], ""]
        rows = [[k, f"{v['p50']:.3f}", f"{v['p95']:.3f}"] for k, v in cost["ms"].items()]
        lines += markdown_table(["ms", "p50", "p95"], rows)
    rows = [[t["tenant"], t["target"], f"{t['value']:.3f}", f"{t['comparison']} {t['threshold']:g}",
             "met" if t["met"] else "**missed**"] for t in checks.get("targets", [])]
    if rows:
        lines += ["### Quality targets", ""] + markdown_table(["tenant", "target", "value", "threshold", ""], rows)
    return (["## Ranking checks", ""] + lines) if lines else []
