"""Family (b): the principal matrix. Each principal aims queries at what it may not see (another
tenant's canary, another group's documents, a source restricted by a rule, documents outside
its session tags) over both transports, and every answer is judged by the suite's own model of
the policy (`oracle.py`): any artifact the principal may not see, any unknown artifact (an
injected one) or any canary string of a hidden artifact is a leak.

    principals  alice, sec, eng, gina; platform as itself, for hr-hank (group hr), for a sales
                session (x-session-tags department:sales); alice forging x-user-id and session
                tags (ignored); carol with a JWT
    targets     the globex canary, the legal canary, the security-team documents, the HR-only
                document, the engineering wiki (source rule), an engineering-tagged note
    calls       MCP search_and_rank (plain; filters.source_ids + artifact_ids), rag_search,
                rag_get_raw_results (sources = the target's), verify_document_access (the
                target's first entry); gRPC SearchAndRank (plain; filters.source_ids; artifact_ids
                + visibility_groups with enforcement off; tenant_id of the other tenant)

A refusal (unauthorized_source, has_access false, PERMISSION_DENIED, ...) counts as refused; an
answer without anything hidden as served. The positive control: every target a principal may see
comes back to it in at least one call, so the matrix can tell a leak from an empty index.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from benchmarks.attacks.oracle import Oracle, Viewer, artifact_of
from benchmarks.attacks.tally import Family
from benchmarks.attacks.wire import Grpc, McpHttp, ToolAnswer
from benchmarks.secure_stack import SECURITY_TEAM_DOCS, SecureStack
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb

HANK = "hr-hank@acme.test"
ALL_GROUPS = ["hr", "legal", "security-team", "engineering"]
REFUSAL_CODES = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
RAW_REFUSALS = ("unauthorized_source", "invalid_source", "unauthorized_user")


@dataclass(frozen=True)
class Principal:
    viewer: Viewer
    headers: dict[str, str] = field(hash=False)


@dataclass(frozen=True)
class Target:
    name: str
    query: str
    source: str
    artifacts: tuple[str, ...]


TARGETS = [
    Target("globex canary", "Globex travel policy hotel expense limits 999 USD per night", "product-docs",
           ("globex-travel",)),
    Target("legal canary", "hotel expense settlement court confidential executives", "legal",
           ("legal-hotel-settlement",)),
    Target("security-team documents", "suspected fleet compromise incident response runbook postmortem",
           "security", tuple(sorted(SECURITY_TEAM_DOCS))),
    Target("HR-only document", "travel exceptions register approvals restricted", "hr-policies",
           ("hr-travel-exceptions-2026",)),
    Target("engineering-wiki (source rule)", "E214 localization lost field notes wiki", "engineering-wiki",
           ("wiki-e214-localization-recovery", "wiki-dock-firmware-compat")),
    Target("engineering-tagged note (session tags)", "engineers customer sites hotels receipts within 30 days",
           "engineering-notes", ("engineering-travel-note",)),
]


def principals(stack: SecureStack) -> list[Principal]:
    def key(who: str, **extra: str) -> dict[str, str]:
        return stack.headers(who, **extra)

    acme = "acme"
    return [
        Principal(Viewer("alice", acme), key("alice")),
        Principal(Viewer("sec", acme, frozenset({"security-team", "legal"})), key("sec")),
        Principal(Viewer("eng", acme, frozenset({"engineering"})), key("eng")),
        Principal(Viewer("gina", "globex"), key("gina")),
        Principal(Viewer("platform", acme), key("platform")),
        Principal(Viewer("platform for hr-hank", acme, frozenset({"hr"})), key("platform", **{"x-user-id": HANK})),
        Principal(Viewer("platform for a sales session", acme, session_tags=("department:sales", "Q4")),
                  key("platform", **{"x-user-id": "sam@acme.test", "x-session-tags": '["department:sales", "Q4"]'})),
        Principal(Viewer("alice forging x-user-id/x-session-tags", acme),
                  key("alice", **{"x-user-id": HANK, "x-session-tags": '["department:engineering"]'})),
        Principal(Viewer("carol (JWT)", acme), {"Authorization": f"Bearer {stack.jwt()}"}),
    ]


class Matrix:
    def __init__(self, fam: Family, stack: SecureStack, oracle: Oracle) -> None:
        self.fam = fam
        self.stack = stack
        self.oracle = oracle
        self.seen: set[tuple[str, str]] = set()       # (principal, target artifact) that came back

    def judge(self, who: Principal, where: str, artifact_ids: list[str], body: Any) -> None:
        ids = [artifact_of(a) for a in artifact_ids]
        leaks = self.oracle.leaks(who.viewer, ids, json.dumps(body, default=str))
        self.seen.update((who.viewer.label, a) for a in ids)
        row = where.split(":")[0]
        if leaks:
            self.fam.record("leak", row, f"{who.viewer.label}: {where}: {', '.join(leaks)}", row=row)
        else:
            self.fam.record("served", row=row)

    def _tool(self, who: Principal, session: McpHttp, name: str, args: dict, where: str) -> dict | None:
        try:
            answer = session.tool(name, args)
        except Exception as err:  # noqa: BLE001 - a probe that cannot tell is an error, not a pass
            self.fam.record("error", f"MCP {name} failed", f"{who.viewer.label}: {where}: {err!r}",
                            row=where.split(":")[0])
            return None
        return self._structured(who, answer, name, where)

    def _structured(self, who: Principal, answer: ToolAnswer, name: str, where: str) -> dict | None:
        if answer.status == 200 and answer.structured is not None and not answer.is_error:
            return answer.structured
        row = where.split(":")[0]
        if answer.error_kind in ("permission_denied", "not_found"):
            self.fam.record("refused", row=row)
        else:
            self.fam.record("error", f"MCP {name} did not answer", f"{who.viewer.label}: {where}: {answer.describe()}",
                            row=row)
        return None

    def mcp(self, who: Principal, session: McpHttp, t: Target) -> None:
        q = f"MCP {{}}: {t.name}"
        scoped = {"filters": {"source_ids": [t.source], "artifact_ids": list(t.artifacts)}}
        for label, args in (("plain", {}), ("source+artifact filter", scoped)):
            out = self._tool(who, session, "search_and_rank",
                             {"user_query_text": t.query, "top_k_final_rank": 20, **args},
                             q.format(f"search_and_rank {label}"))
            if out is not None:
                self.judge(who, q.format(f"search_and_rank {label}"),
                           [r["associated_artifact"]["artifact_id"] for r in out.get("results", [])], out)
        out = self._tool(who, session, "rag_search", {"search_phrases": [t.query], "max_segments": 20},
                         q.format("rag_search"))
        if out is not None:
            self.judge(who, q.format("rag_search"), [s["segment_uid"] for s in out.get("segments", [])], out)
        out = self._tool(who, session, "rag_get_raw_results",
                         {"username": "sec", "query": t.query, "sources": [t.source], "top_k": 20},
                         q.format("rag_get_raw_results"))
        if out is not None:
            hits = (out.get("results") or {}).get("hits") or []
            code = ((out.get("results") or {}).get("error") or {}).get("code", "")
            if not hits and code in RAW_REFUSALS:
                self.fam.record("refused", row="MCP rag_get_raw_results")
            else:
                self.judge(who, q.format("rag_get_raw_results"), [h["id"] for h in hits], out)
        for artifact in t.artifacts[:1]:
            out = self._tool(who, session, "verify_document_access", {"segment_uid": f"{artifact}#0"},
                             q.format("verify_document_access"))
            if out is None:
                continue
            if not out.get("has_access"):
                self.fam.record("refused", row="MCP verify_document_access")
            else:
                self.judge(who, q.format("verify_document_access"), [artifact], out)

    def grpc(self, who: Principal, client: Grpc, t: Target) -> None:
        other_tenant = "acme" if who.viewer.tenant == "globex" else "globex"
        variants = [
            ("plain", rag_pb.SearchAndRankRequest(user_query_text=t.query, top_k_final_rank=20)),
            ("filters.source_ids", rag_pb.SearchAndRankRequest(
                user_query_text=t.query, top_k_final_rank=20,
                filters=pb.KnowledgeSearchFilters(source_ids=[t.source]))),
            ("artifact_ids + visibility_groups, enforcement off", rag_pb.SearchAndRankRequest(
                user_query_text=t.query, top_k_final_rank=20, filters=pb.KnowledgeSearchFilters(
                    artifact_ids=list(t.artifacts), visibility_groups=ALL_GROUPS, enforce_visibility=False))),
            ("tenant_id of the other tenant", rag_pb.SearchAndRankRequest(
                tenant_id=other_tenant, user_query_text=t.query, top_k_final_rank=20,
                filters=pb.KnowledgeSearchFilters(source_ids=[t.source]))),
        ]
        metadata = {k.lower(): v for k, v in who.headers.items() if k.lower() != "authorization"}
        for label, request in variants:
            where = f"gRPC SearchAndRank {label}: {t.name}"
            answer = client.call("rag_pipeline", "SearchAndRank", request, who.headers["Authorization"], metadata)
            if answer.ok:
                ids = [r.associated_artifact.artifact_id for r in answer.response.results]
                self.judge(who, where, ids, MessageToDict(answer.response))
            elif answer.code in REFUSAL_CODES:
                self.fam.record("refused", row=where.split(":")[0])
            else:
                self.fam.record("error", "gRPC SearchAndRank did not answer",
                                f"{who.viewer.label}: {where}: {answer.code.name} {answer.details[:100]}",
                                row=where.split(":")[0])

    def controls(self, everyone: list[Principal]) -> None:
        missing = []
        expected = 0
        for who in everyone:
            visible = self.oracle.visible_ids(who.viewer)
            for t in TARGETS:
                for artifact in t.artifacts:
                    if artifact in visible:
                        expected += 1
                        if (who.viewer.label, artifact) not in self.seen:
                            missing.append(f"{who.viewer.label}/{artifact}")
        self.fam.check("control: every target a principal may see came back to it", not missing and expected > 0,
                       f"{expected - len(missing)}/{expected} seen" + (f"; not seen: {', '.join(missing)}" if missing
                                                                      else ""), calls=0, row="positive control")


def run(fam: Family, stack: SecureStack, oracle: Oracle) -> None:
    matrix = Matrix(fam, stack, oracle)
    everyone = principals(stack)
    client = Grpc(stack.addresses["rag_pipeline"]["grpc"])
    try:
        for who in everyone:
            with McpHttp(stack.mcp_url, who.headers) as session:
                init = session.initialize()
                if init.status != 200:
                    fam.record("error", "MCP session refused", f"{who.viewer.label}: {init.describe()}",
                               row="MCP initialize")
                    continue
                for t in TARGETS:
                    matrix.mcp(who, session, t)
            for t in TARGETS:
                matrix.grpc(who, client, t)
        matrix.controls(everyone)
    finally:
        client.close()


__all__ = ["TARGETS", "Matrix", "principals", "run"]
