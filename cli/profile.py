"""`nucleus profile put|get|list`: ranking profiles through the RAGPipeline API (gRPC), stored
(versioned) by the KnowledgeStore (docs/RANKING.md; model re-ranking: docs/MODELS.md).

    nucleus profile put fresh --tenant demo --weights 0.6,0.3,0.05,0.05 --fusion rrf
    nucleus profile put default --tenant demo --default --reranker cross-encoder --rerank-top-n 20 \\
        --rerank-weight 0.5
    nucleus profile put rm3 --tenant demo --feedback-expansion rm3
    nucleus profile get fresh --tenant demo [--version 1]
    nucleus profile list --tenant demo

As `nucleus persona`: as the user of $NUCLEUS_API_KEY when set (changing a default profile needs
the admin role), else with the operator credential of the local stack. A re-ranker the stack
has not configured is refused, naming `reranker` and what is accepted.
"""
from __future__ import annotations

import argparse
import asyncio
import json

from cli.stack import call_pipeline, put_get_list_parser
from nucleus.v1 import common_pb2 as pb
from ranking.profile import DEFAULT_RERANK_TOP_N, DEFAULT_RERANK_WEIGHT, FEEDBACK_EXPANSIONS, RankingProfile
from services.knowledge_store.convert import profile_from_pb, profile_to_pb
from shared.errors import InvalidArgument


def _weights(text: str) -> tuple[float, float, float, float]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4:
        raise InvalidArgument("--weights", f"four comma-separated numbers (relevancy, recency, richness, "
                                           f"reputation), got {text!r}")
    return values  # type: ignore[return-value]


def _show(p: RankingProfile) -> dict:
    return {"name": p.name, "persona_id": p.persona_id, "version": p.version, "is_default": p.is_default,
            "weights": {"relevancy": p.relevancy_weight, "recency": p.recency_weight,
                        "richness": p.richness_weight, "reputation": p.reputation_weight},
            "fusion_method": p.fusion_method, "dense_weight": p.dense_weight, "recency_mode": p.recency_mode,
            "recency_half_life_days": p.recency_half_life_days,
            "reputation_prior_strength": p.reputation_prior_strength,
            "reranker": p.reranker, "rerank_top_n": p.rerank_top_n, "rerank_weight": round(p.rerank_weight, 6),
            "feedback_expansion": p.feedback_expansion, "fold_duplicates": p.fold_duplicates}


def cmd_profile(args: argparse.Namespace) -> int:
    if args.action in ("put", "get") and not args.name:
        raise InvalidArgument("name", f"is required: nucleus profile {args.action} NAME --tenant T")
    if args.action == "put":
        base = RankingProfile(tenant_id=args.tenant, persona_id=args.persona, name=args.name)
        w = _weights(args.weights) if args.weights else (base.relevancy_weight, base.recency_weight,
                                                          base.richness_weight, base.reputation_weight)
        profile = RankingProfile(
            tenant_id=args.tenant, persona_id=args.persona, name=args.name, relevancy_weight=w[0],
            recency_weight=w[1], richness_weight=w[2], reputation_weight=w[3],
            fusion_method=args.fusion or base.fusion_method, recency_mode=args.recency_mode or base.recency_mode,
            is_default=args.default, reranker=args.reranker, rerank_top_n=args.rerank_top_n,
            rerank_weight=args.rerank_weight, feedback_expansion=args.feedback_expansion,
            fold_duplicates=args.fold_duplicates)
        stored = asyncio.run(call_pipeline(args, "PutRankingProfile", profile_to_pb(profile)))
        print(json.dumps(_show(profile_from_pb(stored)), indent=2))
    elif args.action == "get":
        found = asyncio.run(call_pipeline(args, "GetRankingProfile", pb.GetRankingProfileRequest(
            tenant_id=args.tenant, persona_id=args.persona, name=args.name, version=args.version)))
        print(json.dumps(_show(profile_from_pb(found)), indent=2))
    else:
        found = asyncio.run(call_pipeline(args, "ListRankingProfiles", pb.ListRankingProfilesRequest(
            tenant_id=args.tenant, persona_id=args.persona)))
        print(json.dumps([_show(profile_from_pb(p)) for p in found.profiles], indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = put_get_list_parser(sub, "profile", "name",
                            "ranking profiles: put, get, list (weights, fusion, model re-ranking)")
    p.add_argument("--persona", default="", help="a persona's profile (default: the tenant's)")
    p.add_argument("--version", type=int, default=0, help="get: this version (default the latest)")
    p.add_argument("--weights", default="", help="relevancy,recency,richness,reputation (default the built-in)")
    p.add_argument("--fusion", default="", help="adaptive | convex | convex_minmax | rrf")
    p.add_argument("--recency-mode", default="", help="auto | always | never")
    p.add_argument("--default", action="store_true", help="make it the tenant's (or persona's) default")
    p.add_argument("--reranker", default="", help="model re-ranking: '' = off (default), or one the stack has "
                                                  "configured: cross-encoder, rerank-api, llm, embedding-cosine")
    p.add_argument("--rerank-top-n", type=int, default=DEFAULT_RERANK_TOP_N, help="rows re-scored, 1-50")
    p.add_argument("--rerank-weight", type=float, default=DEFAULT_RERANK_WEIGHT,
                   help="the re-ranker's weight in Relevancy, 0-1")
    p.add_argument("--feedback-expansion", default="", choices=FEEDBACK_EXPANSIONS,
                   help="keyword feedback expansion of the keyword leg: '' = off (default) or rm3 (docs/RANKING.md)")
    p.add_argument("--fold-duplicates", action="store_true",
                   help="fold near-identical documents into one result (docs/RANKING.md \"Duplicates folded\")")
    p.set_defaults(func=cmd_profile)
