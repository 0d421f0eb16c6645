"""`nucleus bench`: quality, latency, throughput and ingest of Nucleus RAG on a BEIR dataset,
per tenant, against the in-process baseline (benchmarks/baseline.py), in one run.

    1. load and check the dataset(s) (benchmarks/beir.py) and plan the tenants (tenants.py)
    2. start a stack (own, ephemeral ports, data under .bench-cache/stack-data) or use a running one
    3. ingest each tenant's documents through KnowledgeStore.IngestDocuments, skipping what the
       manifest and GetTenantStats say is already there
    4. every judged query of each tenant through RAGPipeline.SearchAndRank, once per ranking
       method (queries.py), sequentially: quality per method, latency per stage (`timings`)
       and end to end (client clock); every response checked for tenant isolation, plus a
       pass of the other tenants' queries against each tenant
    5. throughput: 1, 4, 16 concurrent clients, a fixed number of queries each; the needle set
       of each tenant and the latency cost of score completion (ranking_checks.py,
       completion_cost.py)
    6. stop the own stack; the baseline over the same documents, queries and needles, in-process
    7. quality per part of the committed query split, calibration, targets (ranking_checks.py);
       JSON, Markdown, PNG plots into the output directory (report.py)

Quality is computed at document level: a tenant's results are chunks, reduced to artifact
ids (= BEIR `_id`) at their best rank, scored against the qrels of documents that tenant holds.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import completion_cost, ranking_checks
from benchmarks import report as report_mod
from benchmarks import result as result_mod
from benchmarks.baseline import STAGES as BASELINE_STAGES
from benchmarks.baseline import EmbeddingCache, InProcessBaseline, load_model
from benchmarks.beir import BeirDataset, load_dataset
from benchmarks.metrics import evaluate, latency_summary
from benchmarks.options import DEFAULT_OUT, BenchOptions, TenantRun
from benchmarks.queries import (
    IsolationCheck,
    Method,
    QueryRecord,
    RagClient,
    methods_for,
    run_concurrent,
    run_sequential,
)
from benchmarks.splits import load_split, path_for
from benchmarks.stack import Stack, own_stack, running_stack
from benchmarks.tenants import TenantPlan, ingest_plan, plan_tenants
from shared.errors import InvalidArgument, Unavailable

log = logging.getLogger(__name__)

#: Texts outside any dataset, so warming up does not pre-fill a cache with measured queries.
WARMUP_QUERIES = ("how are retrieval benchmarks warmed up", "what does a cold cache cost",
                  "measuring latency of hybrid search", "ranking profiles and fusion weights",
                  "tenant isolation in a vector store", "throughput of concurrent grpc clients",
                  "embedding models on a cpu", "stemming and stopwords in bm25",
                  "normalised scores for convex fusion", "reciprocal rank fusion constant")


def run_bench(options: BenchOptions, console: Console | None = None) -> dict:
    """Run the whole benchmark; returns the result document (also written to the output dir)."""
    console = console or Console()
    options.validate()
    started = time.time()
    load_start = result_mod.loadavg()
    revision = result_mod.git_revision()      # now: the services about to start run this tree
    out_dir = options.out_dir or DEFAULT_OUT / time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    datasets = _load_datasets(options)
    plans = plan_tenants(list(zip(datasets, options.tenants)), options.tenant_slices)
    runs = [TenantRun(p, _queries_for(p, options.max_queries)) for p in plans]
    for run in runs:
        if not run.queries:
            raise InvalidArgument("--tenant-slices", f"tenant {run.plan.tenant} holds no relevant document of any "
                                                     "judged query; use fewer slices")
    methods = methods_for(options.dense_weights)
    needles = {run.plan.tenant: ranking_checks.needle_set(run.plan, options.needle_tokens, options.needle_phrases)
               for run in runs}
    splits = {d.fingerprint: (load_split(d.name, d.split, options.query_split),
                              str(options.query_split or path_for(d.name, d.split))) for d in datasets}

    stack = _open_stack(options, console)
    try:
        service = asyncio.run(_service_phase(options, stack, runs, methods, console, needles))
    finally:
        if stack.started_here:
            with console.status("stopping the benchmark stack…"):
                stack.stop()

    baseline = _baseline_phase(options, datasets, runs, console, needles) if options.baseline else None
    baseline_records = baseline.pop("_records") if baseline else []
    result = result_mod.assemble(options, started, revision, datasets, stack, runs, methods, service, baseline)
    result["ranking_checks"] = ranking_checks.assemble(runs, service["needles"], needles, baseline_records,
                                                       {k: (v[0], v[1] if v[0] else "") for k, v in splits.items()},
                                                       service["completion_cost"])
    result["run"]["host"]["loadavg_1m"] = {"start": load_start, "end": result_mod.loadavg()}
    records = runs_to_records(runs, service) + [asdict(r) for recs in service["needles"].values() for r in recs] \
        + [asdict(r) for r in baseline_records]
    paths = report_mod.write_all(result, records, out_dir, plots=options.plots)
    result["files"] = {k: str(v) for k, v in paths.items()}
    report_mod.print_summary(result, console)
    console.print(f"report: [bold]{paths['markdown']}[/bold]")
    return result


def runs_to_records(runs: list[TenantRun], service: dict) -> list[dict]:
    out = [asdict(r) for run in runs for recs in run.records.values() for r in recs]
    out += [asdict(r) for r in service.get("isolation_records", [])]
    return out


# ------------------------------------------------------------------------------------ phases
def _load_datasets(options: BenchOptions) -> list[BeirDataset]:
    seen: dict[Path, BeirDataset] = {}
    out = []
    for path in options.datasets:
        key = Path(path).resolve()
        if key not in seen:
            seen[key] = load_dataset(key, options.split)
        out.append(seen[key])
    return out


def _queries_for(plan: TenantPlan, limit: int) -> list[tuple[str, str]]:
    ids = plan.query_ids
    if limit:
        ids = ids[:limit]
    return [(q, plan.dataset.queries[q]) for q in ids]


def _open_stack(options: BenchOptions, console: Console) -> Stack:
    if options.use_running:
        stack = running_stack(options.running_data_dir.resolve())
        console.print(f"using the running stack in {stack.data_dir}")
        return stack
    stack_dir = options.stack_dir or options.cache_dir / "stack-data"
    with console.status(f"starting LlmOrchestration, KnowledgeStore, RAGPipeline (data in {stack_dir})…"):
        stack = own_stack(stack_dir, query_cache=options.query_cache)
    console.print(f"stack {'started' if stack.started_here else 'found running'}: "
                  + ", ".join(f"{n} {s['grpc']}" for n, s in stack.services.items()))
    return stack


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


async def _service_phase(options: BenchOptions, stack: Stack, runs: list[TenantRun], methods: list[Method],
                         console: Console, needles: dict[str, list]) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient

    ks = KnowledgeStoreClient(stack.grpc("knowledge_store"), ingest_timeout_s=900.0)
    ingests = []
    try:
        with _progress(console) as progress:
            for run in runs:
                task = progress.add_task(f"ingest {run.plan.tenant}", total=len(run.plan.rows))
                outcome = await ingest_plan(
                    ks, run.plan, stack.data_dir / "bench", batch=options.ingest_batch, force=options.force_ingest,
                    progress=lambda done, total, t=task: progress.update(t, completed=done, total=total))
                ingests.append(outcome)
                for w in outcome.warnings:
                    console.print(f"[yellow]{run.plan.tenant}: {w}[/yellow]")
    finally:
        await ks.close()

    rag_target = stack.grpc("rag_pipeline")
    client = RagClient(rag_target, top_k_initial=options.top_k_initial, top_k_final=options.top_k_final,
                       timeout_s=options.timeout_s, embed_timeout_s=options.embed_timeout_s)
    owned = {run.plan.tenant: set(run.plan.doc_ids) for run in runs}
    everyone = set().union(*owned.values())
    isolation = IsolationCheck()
    isolation_records: list[QueryRecord] = []
    try:
        for run in runs:
            for method in methods:
                await client.ensure_profile(run.plan.tenant, method)
        for run in runs:  # warm-up: connections, profile lookups, model threads (not recorded, not the
            for i, text in enumerate(WARMUP_QUERIES[:options.warmup]):  # measured texts)
                for method in methods:
                    record = await client.search(run.plan.tenant, method, f"warmup-{i}", text)
                    if record.error:  # a request the service rejects would fail every measured query
                        cls = InvalidArgument if record.error.startswith("invalid_argument") else None
                        problem = f"warm-up SearchAndRank failed (tenant {run.plan.tenant}, method {method.name}): " \
                                  f"{record.error}"
                        raise cls("request", problem) if cls else Unavailable(problem)

        total = sum(len(run.queries) for run in runs) * len(methods)
        with _progress(console) as progress:
            task = progress.add_task("SearchAndRank", total=total)
            for run in runs:
                own = owned[run.plan.tenant]
                others_only = everyone - own
                for method in methods:
                    progress.update(task, description=f"SearchAndRank {run.plan.tenant} {method.name}")
                    records = await run_sequential(client, run.plan.tenant, method, run.queries,
                                                   progress=lambda: progress.advance(task))
                    run.records[method.name] = records
                    for r in records:
                        isolation.check(r, own, others_only)
            if len(runs) > 1:  # other tenants' queries against each tenant
                cross = []
                for run in runs:
                    mine = {q for q, _ in run.queries}
                    foreign = [(q, t) for other in runs if other is not run for q, t in other.queries if q not in mine]
                    cross.append((run, list(dict.fromkeys(foreign))))
                task = progress.add_task("isolation pass", total=sum(len(f) for _, f in cross))
                for run, foreign in cross:
                    own = owned[run.plan.tenant]
                    records = await run_sequential(client, run.plan.tenant, methods[0], foreign,
                                                   progress=lambda: progress.advance(task))
                    for r in records:
                        r.method = "isolation"
                        isolation.check(r, own, everyone - own)
                    isolation_records += records
            task = progress.add_task("needles (default method)", total=sum(len(n) for n in needles.values()))
            needle_records = await ranking_checks.run_needles(client, methods[0], needles,
                                                              progress=lambda: progress.advance(task))
    finally:
        await client.close()

    work = _interleave([[(run.plan.tenant, q, t) for q, t in run.queries] for run in runs])
    throughput = []
    with console.status("throughput sweep…") as status:
        for clients in options.concurrency:
            status.update(f"throughput: {clients} concurrent clients × {options.throughput_queries} queries")
            throughput.append(await run_concurrent(
                rag_target, work, clients, options.throughput_queries, top_k_initial=options.top_k_initial,
                top_k_final=options.top_k_final, timeout_s=options.timeout_s,
                embed_timeout_s=options.embed_timeout_s))
        cost = None
        if options.completion_queries:
            status.update("score completion: latency cost…")
            texts = [t for _, t in runs[0].queries][:options.completion_queries]
            cost = await completion_cost.measure(stack.grpc("knowledge_store"), stack.grpc("llm_orchestration"),
                                                 runs[0].plan.tenant, texts, options.completion_top_k)
    return {"ingest": ingests, "isolation": isolation, "isolation_records": isolation_records,
            "throughput": throughput, "needles": needle_records, "completion_cost": cost}


def _interleave(lists: Sequence[Sequence]) -> list:
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def _baseline_phase(options: BenchOptions, datasets: list[BeirDataset], runs: list[TenantRun],
                    console: Console, needles: dict[str, list]) -> dict:
    with console.status("loading all-MiniLM-L6-v2 for the in-process baseline…"):
        model = load_model()
    cache = EmbeddingCache(options.cache_dir)
    vectors: dict[str, tuple] = {}
    cache_info = {}
    for ds in {id(d): d for d in datasets}.values():
        with _progress(console) as progress:
            task = progress.add_task(f"baseline: encode {ds.name} corpus", total=len(ds.corpus))
            started = time.perf_counter()
            vecs, cached = cache.corpus_vectors(
                ds, model, progress=lambda done, total: progress.update(task, completed=done))
            progress.update(task, completed=len(ds.corpus))
        vectors[ds.fingerprint] = vecs
        cache_info[ds.name] = {"path": str(cache.path_for(ds)), "from_cache": cached,
                               "seconds": time.perf_counter() - started}

    out: dict[str, dict] = {}
    pooled: dict[str, list[float]] = {s: [] for s in BASELINE_STAGES}
    records: list[QueryRecord] = []
    query_vectors: dict[str, dict] = {}
    total = sum(len(r.queries) for r in runs)
    with _progress(console) as progress:
        task = progress.add_task("baseline queries", total=total)
        for run in runs:
            plan = run.plan
            corpus = plan.dataset.corpus
            baseline = InProcessBaseline(
                model, [corpus[r].id for r in plan.rows], [corpus[r].body for r in plan.rows],
                vectors[plan.dataset.fingerprint][list(plan.rows)], alpha=options.baseline_alpha,
                depth=options.top_k_final)
            for text in WARMUP_QUERIES[:max(options.warmup, 1)] * 3:
                baseline.search(text)
            ranking: dict[str, list[str]] = {}
            stages: dict[str, list[float]] = {s: [] for s in BASELINE_STAGES}
            for qid, text in run.queries:
                hit, qv = baseline.search(text)
                ranking[qid] = hit.doc_ids
                records.append(QueryRecord(tenant=plan.tenant, method="baseline", query_id=qid,
                                           doc_ids=hit.doc_ids, e2e_ms=hit.timings_ms["total"],
                                           stages_ms=hit.timings_ms))
                for s, ms in hit.timings_ms.items():
                    stages[s].append(ms)
                    pooled[s].append(ms)
                query_vectors.setdefault(plan.dataset.fingerprint, {})[qid] = qv
                progress.advance(task)
            for n in needles.get(plan.tenant, []):
                hit, _ = baseline.search(n.query)
                records.append(QueryRecord(tenant=plan.tenant, method=ranking_checks.BASELINE_NEEDLES,
                                           query_id=n.id, doc_ids=hit.doc_ids))
            means, _ = evaluate(ranking, plan.qrels(), [q for q, _ in run.queries])
            out[plan.tenant] = {"quality": means, "queries": len(run.queries),
                                "latency": {s: latency_summary(v) for s, v in stages.items()}}
    for ds in {id(d): d for d in datasets}.values():
        if ds.fingerprint in query_vectors:
            cache.write_query_vectors(ds, query_vectors[ds.fingerprint])
    return {"tenants": out, "latency_all": {s: latency_summary(v) for s, v in pooled.items()},
            "embedding_cache": cache_info, "alpha": options.baseline_alpha, "_records": records,
            "description": "bm25s (PyStemmer English, English stopwords) + all-MiniLM-L6-v2 + FAISS IndexFlatIP, "
                           f"convex fusion of min-max normalised scores (alpha {options.baseline_alpha:g}) over "
                           f"the union of each leg's top {options.top_k_final}"}
