"""`nucleus tune --tenant T --dataset DIR [--profile NAME] [--dry-run] [--folds K]`: learn a
tenant's ranking from its judged queries, report the held-out gain honestly, and save a new
profile version only when the gain is significant (docs/RANKING.md "nucleus tune").

    1. the BEIR folder is read as `nucleus bench` reads it (corpus.jsonl, queries.jsonl,
       qrels/<split>.tsv); the tenant must already hold the corpus (artifact id = document id)
    2. every judged query is searched through the RAGPipeline's own serving code, run here over
       the running stack's KnowledgeStore and LlmOrchestration (operator credential): its
       untrained candidates, ranking config and the field signals of every local candidate
       (KnowledgeStore GetFieldSignals) are captured, and its features are `served_features` over
       them — what serving computes, so training and serving match. A query whose signals the
       store does not serve stops the command (a model trained without them would be served with
       them). Then a second pass the same way with the profile's keyword feedback expansion "rm3"
       (the store's keyword leg expands the query: services/knowledge_store/keywords.py)
       for the RM3 settings (skipped when the profile has it already: the first pass is that)
    3. nested cross-validation by query (services/rag_pipeline/learning/crossval.py): K outer
       folds only score; on each fold's tuning queries three inner folds choose among the
       current profile, dense weight 0.5 / 0.7, RM3 on ("off, rm3"), and the learned re-ranker
       (linear N100, trees N30 / N100, trees N30 over the RM3 candidates)
    4. the paired report (report.py): per held-out query tuned − current nDCG@10, mean, 95 %
       bootstrap interval, wins / losses / ties, sign test
    5. saved only when the mean gain is > 0 and the interval's lower end is > 0, and not
       --dry-run: the setting chosen on all the queries, as the next version of the profile
       (`next_profile`: an RM3 setting saves feedback_expansion "rm3"; a learned model through
       KnowledgeStore PutRankingModel: stored once by its sha256, the version naming it).
       Otherwise it says why and changes nothing.

Needs the `learn` extra (lightgbm, scipy). Runs as the operator of the local stack.
"""
from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path

import numpy as np

from cli.stack import console, credentials, target, tls_ca
from ranking import Candidates, RankingConfig
from ranking.profile import BUILTIN_PROFILE, RankingProfile
from services.rag_pipeline.feedback import Captured
from shared.errors import InvalidArgument, NotFound, Unavailable

DEPTH = 100                  # candidates asked of each leg (the learned settings re-rank at most 100)
DEFAULT_FOLDS = 5
TUNE_EMBED_TIMEOUT_S = 30.0   # each query's embedding (serving's NUCLEUS_RAG_EMBED_TIMEOUT_S is 3 s)
RM3 = "rm3"                  # the feedback expansion the RM3 settings are captured and saved with


def _settings():
    """The settings tune compares: crossval's, of the RM3 ones "off, rm3" and "trees N30, rm3"
    (each learned setting over RM3 candidates costs one more model per fold)."""
    from services.rag_pipeline.learning.crossval import SETTINGS, Setting
    return tuple(s for s in SETTINGS if not s.feedback or s in (Setting(feedback=True), Setting("trees", 30, True)))


def next_profile(current: RankingProfile, setting) -> RankingProfile:
    """The profile version a chosen setting saves (its model, if any, named by PutRankingModel):
    the setting's dense weight, and feedback_expansion "rm3" for an RM3 setting (else the
    profile's own, with which the current ranking was captured)."""
    profile = replace(current, version=0, updated_unix=0, model_sha256="", feature_version=0)
    if setting.dense_weight is not None:
        profile = replace(profile, dense_weight=setting.dense_weight)
    if setting.feedback:
        profile = replace(profile, feedback_expansion=RM3)
    return profile


def _store(args: argparse.Namespace):
    """The running stack's KnowledgeStore, as its operator."""
    from services.knowledge_store.client import KnowledgeStoreClient

    return KnowledgeStoreClient(target(args, "knowledge_store"), timeout_s=30.0,
                                interceptors=credentials(args, "knowledge_store"), tls_ca_file=tls_ca(args))


async def prepare(args: argparse.Namespace, dataset, qids: list[str], feedback_expansion: str | None = None):
    """query id -> Prepared, each query searched through the serving code (module docstring, 2);
    `feedback_expansion`: searched with the profile's feedback expansion replaced by it."""
    from services.llm_orchestration.client import LlmOrchestrationClient
    from services.rag_pipeline.core import RagPipeline
    from services.rag_pipeline.learning.crossval import Prepared
    from services.rag_pipeline.models import Preferences, SearchRequest
    from shared.settings import RagPipelineSettings

    ks = _store(args)
    llm = LlmOrchestrationClient(target(args, "llm_orchestration"), timeout_s=30.0,
                                 interceptors=credentials(args, "llm_orchestration"), tls_ca_file=tls_ca(args))
    # the operator's own serving code: a longer embed deadline than serving's (a slow model stops nothing)
    settings = RagPipelineSettings().model_copy(update={"embed_timeout_s": TUNE_EMBED_TIMEOUT_S,
                                                        "deadline_s": 2 * TUNE_EMBED_TIMEOUT_S})
    pipeline = RagPipeline(settings, ks, llm)
    captured: list[Captured] = []
    pipeline.learned.capture = captured.append
    if feedback_expansion is not None:
        resolve = pipeline.resolve_profile

        async def resolve_with(tenant_id: str, persona_id: str, name: str) -> RankingProfile:
            return replace(await resolve(tenant_id, persona_id, name), feedback_expansion=feedback_expansion)

        pipeline.resolve_profile = resolve_with             # the serving code, this profile field replaced
    out: dict[str, Prepared] = {}
    try:
        try:
            current = await ks.get_profile(args.tenant, "", args.profile)
        except NotFound:
            current = replace(BUILTIN_PROFILE, tenant_id=args.tenant, name=args.profile or "default", is_default=True)
        for qid in qids:
            captured.clear()
            text = dataset.queries[qid]
            await pipeline.search_and_rank(SearchRequest(
                tenant_id=args.tenant, query=text, top_k_initial=DEPTH, top_k_final=10, sources=("local",),
                prefs=Preferences(profile_name=args.profile)))
            if captured:
                got = captured[-1]
                if got.why:
                    raise Unavailable(f"query {qid!r}: the field signals of its candidates could not be had "
                                      f"({got.why}); tune trains only on the features serving computes")
                out[qid] = Prepared(got.artifact_ids, got.candidates, got.config, got.features_of())
            else:                      # nothing found: scored as an empty ranking
                out[qid] = Prepared([], Candidates.build(dense=np.zeros(0)), RankingConfig(),
                                    lambda rows, fused: np.zeros((0, 0), np.float32))
    finally:
        await pipeline.close()
    return current, out


def _report(args: argparse.Namespace, dataset, prepared, expanded) -> tuple[object, object]:
    """Nested CV over the prepared queries (`expanded`: captured with RM3): (the paired report,
    the chosen setting on all queries)."""
    from services.rag_pipeline.learning.crossval import Learner, Setting, folds, query_groups
    from services.rag_pipeline.learning.report import paired

    qids = list(prepared)
    groups = query_groups(qids, dataset.qrels, dataset.queries)
    learner = Learner(lambda qid, feedback: (expanded if feedback else prepared)[qid], dataset.qrels, _settings(),
                      groups=groups)
    current, tuned = [], []
    for i, held in enumerate(f for f in folds(qids, groups, args.folds) if f):
        held_ids = set(held)
        tune = [q for q in qids if q not in held_ids]
        chosen = learner.choose(tune)
        current += learner.scores(held, Setting(), None)
        tuned += learner.scores(held, chosen.setting, chosen.model)
        console.print(f"fold {i + 1}: {len(tune)} tuning / {len(held)} held-out queries, chosen: "
                      f"{chosen.setting.name}", highlight=False)
    report = paired(current, tuned)
    console.print(f"held-out nDCG@10, paired: {report.line()}", highlight=False)
    return report, learner


async def _save(args: argparse.Namespace, current: RankingProfile, chosen) -> RankingProfile:
    ks = _store(args)
    try:
        profile = replace(next_profile(current, chosen.setting), tenant_id=args.tenant)
        if chosen.setting.kind == "off":
            return await ks.put_profile(profile)
        _, stored = await ks.put_ranking_model(args.tenant, chosen.model_bytes, profile)
        return stored
    finally:
        await ks.close()


def cmd_tune(args: argparse.Namespace) -> int:
    from benchmarks.beir import load_dataset

    if args.folds < 2:
        raise InvalidArgument("--folds", f"must be at least 2, got {args.folds}")
    dataset = load_dataset(Path(args.dataset), args.split)
    qids = [q for q in sorted(dataset.qrels) if q in dataset.queries and any(r > 0 for r in dataset.qrels[q].values())]
    if len(qids) < args.folds:
        raise InvalidArgument("--dataset", f"{len(qids)} judged queries; --folds {args.folds} needs at least as many")
    current, prepared = asyncio.run(prepare(args, dataset, qids))
    expanded = prepared if current.feedback_expansion == RM3 else asyncio.run(prepare(args, dataset, qids, RM3))[1]
    console.print(f"tenant {args.tenant}, profile '{current.name}' v{current.version}"
                  + (f" (its learned model {current.model_sha256[:12]} is not in the comparison: the current "
                     "ranking is scored untrained)" if current.model_sha256 else "")
                  + f"; {len(qids)} judged queries, {args.folds} outer folds", highlight=False)
    report, learner = _report(args, dataset, prepared, expanded)
    if not report.significant:
        console.print(f"not saved: the gain {report.gain:+.4f} is not significant (its 95 % interval "
                      f"[{report.low:+.4f}, {report.high:+.4f}] reaches 0); nothing was changed", highlight=False)
        return 0
    chosen = learner.choose(list(prepared))
    if chosen.setting.kind == "off" and chosen.setting.dense_weight is None and (
            not chosen.setting.feedback or current.feedback_expansion == RM3):
        console.print("not saved: on all the queries the current profile is chosen; nothing was changed")
        return 0
    if args.dry_run:
        console.print(f"--dry-run: would save '{chosen.setting.name}' as the next version of '{current.name}'",
                      highlight=False)
        return 0
    stored = asyncio.run(_save(args, current, chosen))
    console.print(f"saved: profile '{stored.name}' v{stored.version} ({chosen.setting.name}"
                  + (f", model {stored.model_sha256[:12]}" if stored.model_sha256 else "") + ")", highlight=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser("tune", help="learn a tenant's ranking from judged queries; save it only when the "
                                       "held-out gain is significant")
    tune.add_argument("--tenant", required=True, help="the tenant (it must already hold the dataset's corpus)")
    tune.add_argument("--dataset", required=True, help="a BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    tune.add_argument("--split", default="test", help="the qrels split (default test)")
    tune.add_argument("--profile", default="", help="the profile to tune (default: the tenant's default)")
    tune.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help="outer folds of the nested CV (default 5)")
    tune.add_argument("--dry-run", action="store_true", help="print the report only; never save")
    tune.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    tune.add_argument("--llm-orchestration-target", dest="llm_orchestration_target")
    tune.set_defaults(func=cmd_tune)
