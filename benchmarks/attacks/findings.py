"""Family (c): the low findings, each a named check over both transports where both apply.

    feedback oracle      record_feedback on a document the caller cannot see (another group's,
                         another tenant's) answers NOT_FOUND exactly like a missing id; a second
                         vote by the same user on the same document does not count twice
    default profile      a user without the admin role cannot replace the tenant's default
                         ranking profile (PERMISSION_DENIED), and the default is unchanged
    integer ranges       date_from_unix / date_to_unix / version beyond int64 (MCP) or beyond
                         their range (gRPC) are INVALID_ARGUMENT (-32602 or an invalid_argument
                         tool error), never an unhandled error; no new traceback in the log
    tools/call params    a non-string `name` or non-object `arguments` is JSON-RPC -32602, on
                         every MCP port
    Host checks          /documents (with a valid signed link) and the RFC 9728 metadata route
                         refuse a foreign Host; GET /mcp/ never redirects to a Location built
                         from the Host header, on every MCP port
    rate limit           a burst beyond the bucket gets RESOURCE_EXHAUSTED / -32029 with a retry-after
"""
from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlsplit

import grpc

from benchmarks.attacks.tally import Family
from benchmarks.attacks.wire import Forge, Grpc, McpHttp, ToolAnswer
from benchmarks.secure_stack import SecureStack
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from shared.identity import OPERATOR

HIDDEN_ENTRY = "hr-travel-exceptions-2026#0"        # group hr: hidden from alice
OTHER_TENANT_ENTRY = "travel-policy-2026-update#0"   # tenant acme: hidden from gina
VISIBLE_ENTRY = "pallas-battery-guide-2026#0"
HUGE = 2**64
RAG = "rag_pipeline"


def _kind(answer: ToolAnswer) -> str:
    """What an MCP answer amounts to: "ok", "jsonrpc <code>", "http <status>" or the tool error's kind."""
    if answer.status != 200:
        return f"http {answer.status}"
    if answer.rpc_error:
        return f"jsonrpc {answer.rpc_error.get('code')}"
    return answer.error_kind or "ok"


def _same(text_a: str, id_a: str, text_b: str, id_b: str) -> bool:
    return text_a.replace(id_a, "<id>").replace(id_a.split("#")[0], "<id>") == \
        text_b.replace(id_b, "<id>").replace(id_b.split("#")[0], "<id>")


def _bearer(stack: SecureStack, who: str) -> str:
    return f"Bearer {stack.keys[who]}"


def feedback(fam: Family, stack: SecureStack, rag: Grpc) -> None:
    missing = f"attack-missing-{secrets.token_hex(3)}#0"
    for who, hidden, why in (("alice", HIDDEN_ENTRY, "another group's"), ("gina", OTHER_TENANT_ENTRY,
                                                                          "another tenant's")):
        with McpHttp(stack.mcp_url, stack.headers(who)) as s:
            s.initialize()
            for target, hid, miss in (("entry", hidden, missing), ("artifact", hidden.split("#")[0],
                                                                   missing.split("#")[0])):
                a = s.tool("record_feedback", {"target_id": hid, "helpful": False, "target": target})
                b = s.tool("record_feedback", {"target_id": miss, "helpful": False, "target": target})
                ok = _kind(a) == _kind(b) == "not_found" and _same(a.text, hid, b.text, miss)
                fam.check(f"MCP record_feedback on {why} {target} is NOT_FOUND like a missing id ({who})", ok,
                          f"hidden: {a.describe()} | missing: {b.describe()}", calls=2, refused=2 if ok else 1)
        enum = pb.FEEDBACK_TARGET_ENTRY
        a = rag.call(RAG, "RecordFeedback", pb.Feedback(target=enum, target_id=hidden, helpful=False),
                     _bearer(stack, who))
        b = rag.call(RAG, "RecordFeedback", pb.Feedback(target=enum, target_id=missing, helpful=False),
                     _bearer(stack, who))
        ok = a.code == b.code == grpc.StatusCode.NOT_FOUND and _same(a.details, hidden, b.details, missing)
        fam.check(f"gRPC RecordFeedback on {why} entry is NOT_FOUND like a missing id ({who})", ok,
                  f"hidden: {a.code.name} {a.details[:80]!r} | missing: {b.code.name} {b.details[:80]!r}",
                  calls=2, refused=2 if ok else 1)
    with McpHttp(stack.mcp_url, stack.headers("eng")) as s:
        s.initialize()
        votes = [s.tool("record_feedback", {"target_id": VISIBLE_ENTRY, "helpful": True}) for _ in range(3)]
    counts = [(v.structured or {}).get("feedback_helpful") for v in votes]
    ok = all(isinstance(c, int) for c in counts) and counts[0] == counts[1] == counts[2]
    fam.check("one vote per user per document (three helpful votes by eng count once)", ok,
              f"feedback_helpful after each vote: {counts}", calls=3)


def default_profile(fam: Family, stack: SecureStack, rag: Grpc, forge: Forge) -> None:
    name = f"attack-default-{secrets.token_hex(3)}"
    with McpHttp(stack.mcp_url, stack.headers("alice")) as s:
        s.initialize()
        a = s.tool("put_ranking_profile", {"name": name, "is_default": True, "weights": {
            "relevancy": 0.0, "recency": 1.0, "richness": 0.0, "reputation": 0.0}})
    fam.check("MCP put_ranking_profile is_default by a non-admin is refused", _kind(a) == "permission_denied",
              a.describe(), refused=1 if _kind(a) == "permission_denied" else 0)
    profile = pb.RankingProfile(name=name + "-grpc", is_default=True, relevancy_weight=0, recency_weight=1,
                                fusion_method=pb.FUSION_METHOD_RRF)
    b = rag.call(RAG, "PutRankingProfile", profile, _bearer(stack, "eng"))
    refused = b.code == grpc.StatusCode.PERMISSION_DENIED
    fam.check("gRPC PutRankingProfile is_default by a non-admin is refused", refused,
              f"{b.code.name} {b.details[:100]}", refused=int(refused))
    default = rag.call(RAG, "GetRankingProfile", pb.GetRankingProfileRequest(), "Bearer " + forge.token(
        OPERATOR, RAG, tenant="acme"))
    current = default.response.name if default.ok else ""
    fam.check("the tenant's default profile is not the attacker's", not current.startswith(name),
              f"default: {current or default.code.name}")


def _int_verdict(answer: Any, field: str) -> tuple[bool, str]:
    """Refused as invalid, naming nothing secret: gRPC INVALID_ARGUMENT; over MCP JSON-RPC -32602,
    an invalid_argument tool error, or the SDK's argument validation naming `field` (the
    documented tool error for bad arguments of these tools) — never an unhandled error."""
    if isinstance(answer, ToolAnswer):
        kind = _kind(answer)
        named = kind == "validation" and field in answer.text
        return kind in ("jsonrpc -32602", "invalid_argument") or named, answer.describe()
    return answer.code == grpc.StatusCode.INVALID_ARGUMENT, f"{answer.code.name} {answer.details[:100]}"


def integer_ranges(fam: Family, stack: SecureStack, rag: Grpc) -> None:
    log = stack.log_dir / f"{RAG}.log"
    before = log.read_text(errors="replace").count("Traceback") if log.exists() else 0
    with McpHttp(stack.mcp_url, stack.headers("alice")) as s:
        s.initialize()
        cases: list[tuple[str, Any]] = [
            ("MCP search_and_rank filters.date_from_unix = 2**64",
             s.tool("search_and_rank", {"user_query_text": "travel", "filters": {"date_from_unix": HUGE}})),
            ("MCP search_and_rank filters.date_to_unix = -2**64",
             s.tool("search_and_rank", {"user_query_text": "travel", "filters": {"date_to_unix": -HUGE}})),
            ("MCP get_ranking_profile version = 2**64", s.tool("get_ranking_profile", {"version": HUGE})),
            ("MCP rag_search max_segments = 2**64",
             s.tool("rag_search", {"search_phrases": ["travel"], "max_segments": HUGE})),
        ]
    bearer = _bearer(stack, "alice")
    cases += [
        ("gRPC SearchAndRank filters.date_from_unix = 2**63-1", rag.call(
            RAG, "SearchAndRank", rag_pb.SearchAndRankRequest(
                user_query_text="travel", filters=pb.KnowledgeSearchFilters(date_from_unix=2**63 - 1)), bearer)),
        ("gRPC SearchAndRank filters.date_to_unix = -1", rag.call(RAG, "SearchAndRank", rag_pb.SearchAndRankRequest(
            user_query_text="travel", filters=pb.KnowledgeSearchFilters(date_to_unix=-1)), bearer)),
        ("gRPC GetRankingProfile version = -1",
         rag.call(RAG, "GetRankingProfile", pb.GetRankingProfileRequest(version=-1), bearer)),
    ]
    for name, answer in cases:
        field = next(f for f in ("date_from_unix", "date_to_unix", "version", "max_segments") if f in name)
        ok, seen = _int_verdict(answer, field)
        fam.check(f"{name} is refused as invalid, naming the field", ok, seen, refused=int(ok))
    after = log.read_text(errors="replace").count("Traceback") if log.exists() else 0
    fam.check("no new traceback in the RAGPipeline log from these inputs", after == before,
              f"{after - before} new", calls=0)


def tools_call_params(fam: Family, stack: SecureStack, forge: Forge) -> None:
    for service in ("rag_pipeline", "knowledge_store", "llm_orchestration"):
        headers = (stack.headers("alice") if service == RAG
                   else {"Authorization": "Bearer " + forge.token(OPERATOR, service, tenant="acme")})
        with McpHttp(stack.addresses[service]["mcp"], headers) as s:
            s.initialize()
            for label, params in (("name = 123", {"name": 123, "arguments": {}}),
                                  ("name = null", {"name": None}),
                                  ("arguments = []", {"name": "list_ranking_profiles" if service == RAG
                                                      else "tenant_stats", "arguments": []})):
                answer = s.request("tools/call", params)
                ok = _kind(answer) == "jsonrpc -32602"
                fam.check(f"{service} MCP tools/call with {label} is JSON-RPC -32602", ok, answer.describe(),
                          refused=int(ok))


def host_checks(fam: Family, stack: SecureStack) -> None:
    with McpHttp(stack.mcp_url, stack.headers("alice")) as s:
        s.initialize()
        found = s.tool("rag_search", {"search_phrases": ["battery controller reset"], "max_segments": 1})
        link = ((found.structured or {}).get("segments") or [{}])[0].get("source_url", "")
        good = s.client.get(link) if link else None
        fam.check("control: a signed /documents link opens with the right Host", good is not None and
                  good.status_code == 200, f"HTTP {good.status_code}" if good is not None else found.describe(),
                  calls=2)
        if link:
            evil = s.client.get(link, headers={"Host": "evil.example"})
            ok = evil.status_code in (400, 421)
            fam.check("/documents with a valid link and a foreign Host is refused", ok,
                      f"HTTP {evil.status_code}", refused=int(ok))
        meta = s.client.get(stack.base_url + "/.well-known/oauth-protected-resource/mcp",
                            headers={"Host": "evil.example"})
        ok = meta.status_code in (400, 404, 421)
        fam.check("RFC 9728 metadata route with a foreign Host is refused (or absent)", ok,
                  f"HTTP {meta.status_code}", refused=int(ok))
    for service in ("rag_pipeline", "knowledge_store", "llm_orchestration"):
        url = stack.addresses[service]["mcp"].rstrip("/") + "/"
        with McpHttp(url) as s:
            for host in ("evil.example", urlsplit(url).netloc):
                r = s.client.get(url, headers={"Host": host, "Accept": "text/event-stream"})
                location = r.headers.get("location", "")
                redirected = 300 <= r.status_code < 400
                ok = not (redirected and (not location.startswith("/") or host in location))
                fam.check(f"{service} GET /mcp/ with Host {host} makes no redirect from the Host header", ok,
                          f"HTTP {r.status_code}" + (f" Location: {location}" if location else ""),
                          refused=int(ok and r.status_code >= 400))


def rate_limit(fam: Family, stack: SecureStack, rag: Grpc) -> None:
    who = f"burst-{secrets.token_hex(3)}"
    bearer = "Bearer " + stack.jwt(sub=who)
    refused_at, retry_after = 0, ""
    for i in range(1, 201):
        answer = rag.call(RAG, "ListRankingProfiles", pb.ListRankingProfilesRequest(), bearer, retry=False)
        if answer.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            refused_at, retry_after = i, answer.retry_after
            break
    fam.check("gRPC: a burst of calls by one user gets RESOURCE_EXHAUSTED with retry-after",
              bool(refused_at and retry_after), f"refused at call {refused_at or '-'}, retry-after {retry_after!r}",
              calls=refused_at or 200, refused=1 if refused_at else 0)
    with McpHttp(stack.mcp_url, {"Authorization": "Bearer " + stack.jwt(sub=who + "-mcp")}) as s:
        s.initialize()
        refused_at, data = 0, {}
        for i in range(1, 201):
            answer = s.tool("list_ranking_profiles", {}, retry=False)
            if answer.rpc_error and answer.rpc_error.get("code") == -32029:
                refused_at, data = i, answer.rpc_error.get("data") or {}
                break
    fam.check("MCP: a burst of tool calls by one user gets -32029 with retry_after",
              bool(refused_at and data.get("retry_after")), f"refused at call {refused_at or '-'}, data {data}",
              calls=refused_at or 200, refused=1 if refused_at else 0)


def run(fam: Family, stack: SecureStack, forge: Forge) -> None:
    rag = Grpc(stack.addresses[RAG]["grpc"])
    try:
        for section, step in (("feedback oracle", lambda: feedback(fam, stack, rag)),
                              ("default profile", lambda: default_profile(fam, stack, rag, forge)),
                              ("integer ranges", lambda: integer_ranges(fam, stack, rag)),
                              ("tools/call params", lambda: tools_call_params(fam, stack, forge)),
                              ("Host checks", lambda: host_checks(fam, stack)),
                              ("rate limit", lambda: rate_limit(fam, stack, rag))):
            fam.section = section
            try:
                step()
            except Exception as err:  # noqa: BLE001 - one broken check must not hide the others
                fam.record("error", f"{section} check crashed", repr(err)[:300])
    finally:
        rag.close()


__all__ = ["run"]
