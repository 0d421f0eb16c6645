"""What a profile's learned model costs a SearchAndRank through the running stack (issue 32).

    python -m lab.learned_serving --data-dir DIR --tenant scifact --dataset ../shared/data/scifact

On a stack that already holds the dataset's corpus (e.g. a copy of `nucleus bench`'s
.bench-cache/stack-data, started with `nucleus --data-dir DIR up --detach --ephemeral-ports`):
the judged queries are captured through the serving code as `nucleus tune` does (cli/tune.py),
a LambdaMART model of 100 trees over the top 100 is trained on all of them and stored with
PutRankingModel as the profile "learned-cost" (a copy of the default profile naming it) — this
WRITES to the stack: use a copy. Then every query is sent to the RAGPipeline (gRPC, operator)
with the default profile and with "learned-cost", alternating, each timing the best of ROUNDS;
printed: p50 of each, p50 of the per-query difference, and whether every learned answer was
served by the model (not degraded). The model's quality is not measured here (it has seen the
queries): `nucleus tune` reports that, held out.

    python -m lab.learned_serving ... --other-data-dir DIR2 [--timing-only]

`--other-data-dir`: a second running stack (e.g. another revision's code on another copy, after
this command ran there once to store its "learned-cost"), timed in the same loop — each query on
one stack then the other, alternating which goes first — so two revisions are compared at the
same moment of the shared machine's load. `--timing-only` skips the training (the profile must
exist on every stack timed). `--profile NAME` times another existing profile against the default
instead of "learned-cost" (with `--timing-only`; e.g. one put with `nucleus profile put rm3
--tenant T --feedback-expansion rm3`: what keyword feedback expansion costs a query).
"""
from __future__ import annotations

import argparse
import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.beir import load_dataset
from cli.stack import credentials, target, tls_ca
from cli.tune import prepare
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.rag_pipeline.learning.crossval import Learner, Setting
from services.rag_pipeline.learning.train import fit
from shared.grpc_client import aio_channel

ROUNDS = 3
PROFILE = "learned-cost"


async def _store(args, raw: bytes, current) -> str:
    ks = KnowledgeStoreClient(target(args, "knowledge_store"), timeout_s=30.0,
                              interceptors=credentials(args, "knowledge_store"), tls_ca_file=tls_ca(args))
    try:
        profile = replace(current, name=PROFILE, version=0, is_default=False, model_sha256="", feature_version=0)
        sha, stored = await ks.put_ranking_model(args.tenant, raw, profile)
        print(f"stored model {sha[:12]} ({len(raw)} B) as profile '{stored.name}' v{stored.version}")
        return sha
    finally:
        await ks.close()


async def _time(args, queries: list[str]) -> None:
    stacks = [args] + ([replace_dir(args, args.other_data_dir)] if args.other_data_dir else [])
    async with AsyncExitStack() as exit_stack:
        stubs = []
        for a in stacks:
            channel = await exit_stack.enter_async_context(
                aio_channel(target(a, "rag_pipeline"), credentials(a, "rag_pipeline"), tls_ca_file=tls_ca(a)))
            stubs.append(rag_grpc.RagPipelineStub(channel))

        async def one(stub, text: str, profile: str) -> tuple[float, rag_pb.SearchAndRankResponse]:
            t0 = time.perf_counter()
            r = await stub.SearchAndRank(rag_pb.SearchAndRankRequest(
                tenant_id=args.tenant, user_query_text=text, top_k_initial_retrieve=100, top_k_final_rank=10,
                ranking_prefs=pb.RankingPreferences(profile_name=profile)), timeout=30)
            return time.perf_counter() - t0, r

        for stub in stubs:
            for text in queries[:5]:                     # warm up: the model is read and cached once
                await one(stub, text, args.timed)
                await one(stub, text, "")
        served_mark = "learned=trees" if args.timed == PROFILE else ""
        base = [[] for _ in stubs]
        learned = [[] for _ in stubs]
        served = [0 for _ in stubs]
        for q, text in enumerate(queries):
            order = list(range(len(stubs))) if q % 2 == 0 else list(reversed(range(len(stubs))))
            for s in order:
                best = [float("inf"), float("inf")]
                for _ in range(ROUNDS):
                    for profile in (("", args.timed) if q % 2 == 0 else (args.timed, "")):
                        seconds, r = await one(stubs[s], text, profile)
                        slot = 0 if profile == "" else 1
                        best[slot] = min(best[slot], seconds)
                        if slot == 1 and not r.degraded and served_mark in r.debug_information:
                            served[s] += 1
                base[s].append(best[0])
                learned[s].append(best[1])
    ms = lambda v: float(np.median(v) * 1000.0)  # noqa: E731
    for s, a in enumerate(stacks):
        diff = np.asarray(learned[s]) - np.asarray(base[s])
        print(f"{a.data_dir}: {len(queries)} queries, best of {ROUNDS}: SearchAndRank p50 default "
              f"{ms(base[s]):.2f} ms, {args.timed} {ms(learned[s]):.2f} ms, per-query difference p50 "
              f"{ms(diff):+.2f} ms; served as asked (not degraded{', by the model' if served_mark else ''}) "
              f"{served[s]}/{len(queries) * ROUNDS}")


def replace_dir(args, data_dir: str):
    other = argparse.Namespace(**vars(args))
    other.data_dir = data_dir
    return other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--other-data-dir", default="", help="a second running stack, timed in the same loop")
    parser.add_argument("--timing-only", action="store_true", help="no training: the profile exists already")
    parser.add_argument("--profile", dest="timed", default=PROFILE,
                        help="the profile timed against the default (with --timing-only)")
    args = parser.parse_args()
    args.profile, args.knowledge_store_target, args.llm_orchestration_target = "", None, None
    args.rag_pipeline_target = None
    dataset = load_dataset(args.dataset, args.split)
    qids = [q for q in sorted(dataset.qrels) if q in dataset.queries]
    if args.timing_only:
        asyncio.run(_time(args, [dataset.queries[q] for q in qids]))
        return
    current, prepared = asyncio.run(prepare(args, dataset, qids))
    learner = Learner(lambda qid, feedback: prepared[qid], dataset.qrels, [Setting("trees", 100)])
    raw, model, _ = fit("trees", learner.rows(qids, Setting("trees", 100)), 100, rounds=100)
    print(f"trained: {len(model.forest.roots)} trees over the top {model.top_n}")
    asyncio.run(_store(args, raw, current))
    asyncio.run(_time(args, [dataset.queries[q] for q in qids]))


if __name__ == "__main__":
    main()
