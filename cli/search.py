"""`nucleus search "q" --tenant T`: RAGPipeline.SearchAndRank as one named principal, printed as
a table of ranked results with the four scores (or the raw response with --json)."""
from __future__ import annotations

import argparse
import asyncio
import json
import time

import grpc
from google.protobuf.json_format import MessageToDict
from rich.markup import escape
from rich.table import Table

from cli.stack import console, credentials, target, tls_ca
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from shared.errors import InvalidArgument
from shared.grpc_client import aio_channel
from shared.grpc_errors import from_grpc_error
from shared.identity import ANSWERED_AS_METADATA, LOCAL_PRINCIPAL_METADATA
from shared.settings import RagPipelineSettings, cli_settings


def cmd_search(args: argparse.Namespace) -> int:
    check_top_k(args.top_k)
    return asyncio.run(_search(args))


def check_top_k(top_k: int) -> None:
    """`--top-k` as the service accepts it: 0 is not "the default" here (leave the flag out for
    that), it is refused like 101 is."""
    fields = RagPipelineSettings.model_fields
    limit, default = fields["max_top_k_final"].default, fields["default_top_k_final"].default
    if top_k < 1:
        raise InvalidArgument("--top-k", f"must be between 1 and {limit} (leave it out for {default}), got {top_k}")


async def _search(args: argparse.Namespace) -> int:
    """SearchAndRank as one principal, named in the output: with authentication off, the local
    principal — the user and groups RAGPipeline's MCP endpoint gives a local caller — of the
    tenant `--tenant` names (as `nucleus ingest --tenant` writes to it), unless `--as-operator`
    (every document of any tenant); with it on, the user of $NUCLEUS_API_KEY (whose tenant
    the key decides), else the operator (the CLI's own key)."""
    request = rag_pb.SearchAndRankRequest(
        tenant_id=args.tenant, persona_id=args.persona, user_query_text=args.query, top_k_final_rank=args.top_k,
        expand_query_with_llm=args.expand, fold_duplicates=True if args.fold_duplicates else None,
        ranking_prefs=pb.RankingPreferences(profile_name=args.profile, explain=True, rerank=args.rerank))
    key = cli_settings(args).api_key.get_secret_value()   # search as that user when the pipeline requires auth,
    signing = None if key else credentials(args, "rag_pipeline")   # else as the operator (public documents)
    # Authentication off (nothing verifies a key, no operator key): as the local principal, unless
    # --as-operator. With it on, RAGPipeline answers as the verified caller and ignores the ask.
    as_local = signing is None and not args.as_operator
    metadata = [("authorization", f"Bearer {key}")] if key else []
    if as_local:
        metadata.append(LOCAL_PRINCIPAL_METADATA)
    async with aio_channel(target(args, "rag_pipeline"), signing, tls_ca_file=tls_ca(args)) as channel:
        stub = rag_grpc.RagPipelineStub(channel)
        pending = (stub.WhyNot(rag_pb.WhyNotRequest(search=request, artifact_ids=args.why_not), timeout=30.0,
                               metadata=tuple(metadata) or None) if args.why_not else
                   stub.SearchAndRank(request, timeout=30.0, metadata=tuple(metadata) or None))
        try:
            response = await pending
            answered = dict(await pending.initial_metadata() or ()).get(ANSWERED_AS_METADATA, "")
        except grpc.RpcError as err:
            failure = from_grpc_error(err, service="RAGPipeline")
            if as_local and not key and failure.kind == "permission_denied":
                failure.message += (" (`nucleus search` acts as the stack's local principal of the tenant "
                                    "--tenant names; --as-operator searches any tenant as the operator)")
            raise failure from None
    answered = answered or ("the local principal" if as_local and not key else "the operator")
    if args.why_not:
        return _why_not(args, json.loads(response.result_json), answered)
    if args.json:
        console.print_json(json.dumps({**MessageToDict(response), "answeredAs": answered}))
        return 0
    title = f"“{args.query}” — tenant {args.tenant}, profile {response.profile_name}@v{response.profile_version}"
    if response.temporal_intent:
        title += " [temporal intent: recency on]"
    table = Table(title=title, show_lines=False)
    for col, just in (("#", "right"), ("overall", "right"), ("relev.", "right"), ("recency", "right"),
                      ("richness", "right"), ("reput.", "right"), ("title", "left"), ("source", "left"),
                      ("modified", "left")):
        table.add_column(col, justify=just)
    for i, r in enumerate(response.results, 1):
        s = r.individual_scores
        a = r.associated_artifact
        table.add_row(str(i), f"{r.overall_rank_score:.3f}", f"{s.relevancy:.3f}", f"{s.recency:.3f}",
                      f"{s.richness:.3f}", f"{s.reputation:.3f}", a.title[:48], a.source_type,
                      time.strftime("%Y-%m-%d", time.gmtime(a.modified_unix)) if a.modified_unix else "-")
    console.print(table)
    for r in response.results:
        if r.duplicates:
            console.print(f"{escape(r.associated_artifact.artifact_id)} folds "
                          + ", ".join(escape(d.artifact_id) for d in r.duplicates))
    if response.results:
        top = response.results[0]
        console.print(f"[bold]top snippet[/bold] ({top.persona_knowledge_entry_id}): {top.snippet}")
        learned = learned_line(top.explanation)
        if learned:
            console.print(learned)
    if response.search_id:
        console.print(f"search id {response.search_id} (name it when voting on these results: record_feedback)")
    if response.degraded:
        console.print(f"[yellow]degraded:[/yellow] {'; '.join(response.degraded_reasons)}")
    timings = ", ".join(f"{t.stage} {t.ms:.1f}ms" for t in response.timings)
    console.print(f"[dim]{timings}[/dim]")
    console.print(f"answered as {escape(answered)}" + (" — --as-operator: every document of the tenant"
                                                       if answered.startswith("local principal") else ""))
    return 0


def _why_not(args: argparse.Namespace, answer: dict, answered: str) -> int:
    """`--why-not`: each document's deciding factor (docs/RANKING.md "Why not"), or the JSON answer."""
    if args.json:
        console.print_json(json.dumps({**answer, "answeredAs": answered}))
        return 0
    table = Table(title=f"why not — “{escape(args.query)}”: {answer['shown']} shown of {answer['candidates']} "
                        f"candidates, page size {answer['page_size']}")
    for col in ("document", "deciding factor", "rank", "dense", "keyword", "why"):
        table.add_column(col)
    for d in answer["documents"]:
        legs = [d.get(leg) or {} for leg in ("dense", "keyword")]
        table.add_row(escape(d["artifact_id"]), d["deciding_factor"] or "-", str(d["rank"] or "-"),
                      *(f"#{x.get('rank') or '-'} {x['score']:.3f}" if x.get("score") is not None else "-"
                        for x in legs),
                      escape(d["detail"] or d["error"]))
    console.print(table)
    console.print(f"answered as {escape(answered)}")
    return 0


def learned_line(e: rag_pb.ScoreExplanation) -> str:
    """The top result's feature contributions to a learned model's score, one line ("" without)."""
    if not e.feature_contributions:
        return ""
    parts = [f"{escape(c.name)} {f'{c.value:.3g}' if c.HasField('value') else '-'} {c.contribution:+.3f}"
             for c in e.feature_contributions]
    return f"[bold]learned model[/bold] on the top result: base {e.learned_base:.3f}; " + ", ".join(parts)


def register(sub: argparse._SubParsersAction) -> None:
    search = sub.add_parser("search", help="SearchAndRank and print a table of ranked results")
    search.add_argument("query")
    search.add_argument("--tenant", required=True)
    search.add_argument("--persona", default="")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--profile", default="")
    search.add_argument("--expand", action="store_true")
    search.add_argument("--rerank", action="store_true")
    search.add_argument("--json", action="store_true", help="print the raw response as JSON")
    search.add_argument("--fold-duplicates", action="store_true",
                        help="fold near-identical documents into one result (default: the profile's setting)")
    search.add_argument("--why-not", nargs="+", metavar="ARTIFACT_ID", default=[],
                        help="why these documents (at most 5) are not among this search's results")
    search.add_argument("--as-operator", action="store_true",
                        help="authentication off: search as the operator (every document of any tenant) "
                             "instead of as the local principal that MCP callers get")
    search.add_argument("--rag-pipeline-target", dest="rag_pipeline_target")
    search.set_defaults(func=cmd_search)
