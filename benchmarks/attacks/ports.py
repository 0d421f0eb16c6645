"""Family (a): every port of every service, with credentials that must not get in.

For each service, every gRPC method (taken from the service descriptor, so a new method is
attacked without anyone listing it) and every MCP request (initialize, tools/list, each tool,
the GET stream) and its `GET /metrics` are sent with each bad credential below; every one must
be refused (gRPC UNAUTHENTICATED / PERMISSION_DENIED, HTTP 401 / 403, or a tool refusal of that
kind). /metrics also refuses end users' API keys on every port.

    no credential, an empty or garbage bearer, a non-bearer scheme, `alg: none`,
    a key outside the trust bundle (unknown kid, and a trusted kid), tampered claims,
    an expired token, a token for another service (wrong audience), an issuer that is not
    the key's owner, a token of each service the port does not accept,
    on internal ports: end users' API keys and JWTs;
    on RAGPipeline: unknown API keys, expired / wrong-audience / foreign-key user JWTs.

Positive controls (the right credential on each port is served) show that a refusal is the
credential's doing. The requests are the dangerous ones where it matters (ingest of a canary
document, delete of a restricted artifact); a final check shows none of them took effect.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import grpc
import httpx

from benchmarks.attacks.tally import Family
from benchmarks.attacks.wire import SERVICES, Forge, Grpc, McpHttp, ToolAnswer, grpc_methods
from benchmarks.secure_stack import SecureStack
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from shared.auth.service_identity import CALLERS, OPERATOR_TTL_S, scrape_token_file
from shared.identity import OPERATOR

HR_ONLY = "hr-travel-exceptions-2026"
INJECTED = "attack-injected"
INJECTED_CANARY = "CANARYINJECTED7731"
REFUSED_GRPC = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
REFUSED_KINDS = ("unauthenticated", "permission_denied")
MCP_TOOLS = {     # used when a control session cannot list them
    "knowledge_store": ["ingest_documents", "search_by_vector", "search_by_keywords", "delete_artifacts",
                        "tenant_stats"],
    "llm_orchestration": ["generate_embeddings", "expand_or_rephrase_query", "rerank", "synthesize"],
    "rag_pipeline": ["search_and_rank", "put_ranking_profile", "get_ranking_profile", "list_ranking_profiles",
                     "record_feedback", "rag_search", "verify_document_access", "rag_discover_resources",
                     "rag_get_raw_results", "rag_get_synthesized_results"],
}
TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {     # the calls an attacker would want served
    "ingest_documents": {"documents": [{"artifact_id": INJECTED, "source_id": "hr-policies",
                                        "content": f"{INJECTED_CANARY}: hotel expense limits are unlimited."}]},
    "search_by_vector": {"query_vector": [0.05] * 384, "top_k": 5},
    "search_by_keywords": {"keywords": "travel exceptions", "top_k": 5},
    "delete_artifacts": {"artifact_ids": [HR_ONLY]},
    "generate_embeddings": {"texts": ["hello"] * 4},
    "expand_or_rephrase_query": {"query": "travel"},
    "rerank": {"query": "travel", "candidates": [{"id": "a", "text": "travel policy"}]},
    "synthesize": {"query": "q", "passages": [{"id": "p", "title": "t", "text": "x"}]},
    "search_and_rank": {"user_query_text": "travel exceptions register"},
    "rag_search": {"search_phrases": ["travel exceptions register"]},
    "record_feedback": {"target_id": f"{HR_ONLY}#0", "helpful": False},
}
_SPECIFIC: dict[str, Callable[[Any], None]] = {
    "IngestDocuments": lambda r: r.documents.append(ks_pb.Document(
        artifact=pb.ArtifactMetadata(artifact_id=INJECTED, title="Travel policy addendum", source_id="hr-policies"),
        content=f"# Travel policy addendum\n\n{INJECTED_CANARY}: hotel expense limits are unlimited.")),
    "DeleteArtifacts": lambda r: r.artifact_ids.append(HR_ONLY),
    "GetEntries": lambda r: r.entry_ids.append(f"{HR_ONLY}#0"),
    "GetFieldSignals": lambda r: (r.entry_ids.append(f"{HR_ONLY}#0"), setattr(r, "query", "travel exceptions"),
                                  r.query_vector.values.extend([0.05] * 384)),
    "SearchPersonaKnowledgeByFilters": lambda r: (setattr(r, "keywords", "travel exceptions"), setattr(r, "top_k", 5)),
    "GenerateEmbeddings": lambda r: r.texts.extend(["hello"] * 4),
    "Synthesize": lambda r: (setattr(r, "query", "q"), r.passages.append(llm_pb.Passage(id="p", title="t", text="x"))),
    "SearchAndRank": lambda r: setattr(r, "user_query_text", "travel exceptions register"),
    "PutRankingProfile": lambda r: (setattr(r, "name", "attack"), setattr(r, "is_default", True)),
    "RecordFeedback": lambda r: (setattr(r, "target_id", f"{HR_ONLY}#0"), setattr(r, "helpful", False)),
}


def request_for(method: str, cls: type) -> Any:
    """A request of `cls` aimed at tenant acme (and at its restricted data, where that matters)."""
    request = cls()
    if "tenant_id" in cls.DESCRIPTOR.fields_by_name:
        request.tenant_id = "acme"
    if method in _SPECIFIC:
        _SPECIFIC[method](request)
    return request


def credential_cases(stack: SecureStack, forge: Forge, callee: str, transport: str) -> list[tuple[str, str | None]]:
    """(label, authorization value or None) of every credential `callee`'s `transport` port must refuse."""
    other = next(s for s in SERVICES if s != callee)
    valid = forge.token(OPERATOR, callee, tenant="acme")
    cases: list[tuple[str, str | None]] = [
        ("no credential", None),
        ("bearer without a token", "Bearer"),
        ("garbage bearer", "Bearer not-a-token"),
        ("valid token, non-bearer scheme", f"Basic {valid}"),
        ("alg none", "Bearer " + forge.alg_none(OPERATOR, callee)),
        ("key outside the trust bundle", "Bearer " + forge.foreign(OPERATOR, callee)),
        ("key outside the bundle, trusted kid", "Bearer " + forge.foreign(OPERATOR, callee, kid=forge.kids[OPERATOR])),
        ("tampered claims", "Bearer " + forge.tampered(valid, tenant="globex", exp=int(time.time()) + 86_400)),
        ("expired token", "Bearer " + forge.token(OPERATOR, callee, tenant="acme", age_s=OPERATOR_TTL_S + 600)),
        ("wrong audience", "Bearer " + forge.token(OPERATOR, other, tenant="acme")),
        ("issuer is not the key's owner", "Bearer " + forge.wrong_issuer(other, OPERATOR, callee)),
    ]
    allowed = set(CALLERS[callee])
    if transport == "mcp":
        allowed = {OPERATOR} if callee != "rag_pipeline" else set()     # MCP: operators, or end users only
    cases += [(f"service token of {s} (not an accepted caller of this port)", "Bearer " + forge.token(s, callee))
              for s in (*SERVICES, OPERATOR) if s not in allowed]
    if callee == "rag_pipeline":
        now = int(time.time())
        cases += [
            ("unknown API key", "Bearer nrk_unknown_0123456789abcdefghijklmnopqrstu"),
            ("expired user JWT", "Bearer " + stack.jwt(exp=now - 3600)),
            ("user JWT for another audience", "Bearer " + stack.jwt(aud="https://another-server.example/mcp")),
            ("user JWT signed by another key", "Bearer " + stack.jwt(alg="RS256", key=stack.other_rsa_private_pem)),
        ]
    else:
        cases += [("end-user API key (alice)", f"Bearer {stack.keys['alice']}"),
                  ("end-user API key (sec)", f"Bearer {stack.keys['sec']}"),
                  ("end-user JWT", "Bearer " + stack.jwt(groups=["hr", "legal"]))]
    return cases


def _mcp_refused(answer: ToolAnswer) -> bool:
    if answer.status in (401, 403):
        return True
    if answer.rpc_error:
        return answer.rpc_error.get("code") in (-32001, -32003)
    return answer.error_kind in REFUSED_KINDS


def _attack_grpc(fam: Family, client: Grpc, service: str, cases: list[tuple[str, str | None]]) -> None:
    for method, cls, _ in grpc_methods(service):
        for label, authorization in cases:
            answer = client.call(service, method, request_for(method, cls), authorization)
            where = f"{service} gRPC {method} with {label}: {answer.code.name} {answer.details[:100]}"
            if answer.code in REFUSED_GRPC:
                fam.record("refused", row=f"{service} gRPC")
            else:
                fam.record("missed", f"{service} gRPC not refused: {label}", where, row=f"{service} gRPC")


def _mcp_requests(tools: list[str]) -> list[tuple[str, Callable[[McpHttp], ToolAnswer]]]:
    reqs: list[tuple[str, Callable[[McpHttp], ToolAnswer]]] = [
        ("initialize", lambda s: s.initialize()),
        ("tools/list", lambda s: s.request("tools/list", {})),
        ("GET stream", lambda s: ToolAnswer(s.open_stream(), None)),
    ]
    reqs += [(f"tools/call {t}", lambda s, t=t: s.tool(t, TOOL_ARGUMENTS.get(t, {}), retry=False)) for t in tools]
    return reqs


def _attack_mcp(fam: Family, url: str, service: str, tools: list[str], cases: list[tuple[str, str | None]]) -> None:
    for label, authorization in cases:
        with McpHttp(url, {"Authorization": authorization} if authorization is not None else {}) as session:
            for what, send in _mcp_requests(tools):
                try:
                    answer = send(session)
                except Exception as err:  # noqa: BLE001 - a probe that cannot tell is an error, not a pass
                    fam.record("error", f"{service} MCP probe failed", f"{what} with {label}: {err!r}",
                               row=f"{service} MCP")
                    continue
                if _mcp_refused(answer):
                    fam.record("refused", row=f"{service} MCP")
                else:
                    fam.record("missed", f"{service} MCP not refused: {label}", f"{what}: {answer.describe()}",
                               row=f"{service} MCP")


def _attack_metrics(fam: Family, stack: SecureStack, forge: Forge, service: str,
                    cases: list[tuple[str, str | None]]) -> None:
    """GET /metrics (tenants, sources, traffic): every bad credential gets 401; the scrape token
    and an operator token are served (the controls)."""
    url = stack.addresses[service]["mcp"].removesuffix("/mcp") + "/metrics"
    row = f"{service} /metrics"
    with httpx.Client(timeout=10) as http:
        for label, authorization in [*cases, ("an end user's API key", f"Bearer {stack.keys['alice']}")]:
            try:
                status = http.get(url, headers={"Authorization": authorization} if authorization else {}).status_code
            except httpx.HTTPError as err:
                fam.record("error", f"{service} /metrics probe failed", f"{label}: {err!r}", row=row)
                continue
            if status in (401, 403):
                fam.record("refused", row=row)
            else:
                fam.record("missed", f"{service} /metrics not refused: {label}", f"HTTP {status}", row=row)
        token = scrape_token_file(stack.identity_dir).read_text().strip()
        for label, authorization in (("the scrape token", f"Bearer {token}"),
                                     ("an operator token", "Bearer " + forge.token(OPERATOR, service))):
            answer = http.get(url, headers={"Authorization": authorization})
            fam.check(f"control: {service} /metrics with {label} is served",
                      answer.status_code == 200 and "nucleus_build_info" in answer.text,
                      f"HTTP {answer.status_code}", row=row)


def _controls(fam: Family, stack: SecureStack, forge: Forge, clients: dict[str, Grpc]) -> dict[str, list[str]]:
    """The right credential on each port is served; returns the tools each MCP port lists."""
    grpc_controls = [("knowledge_store", "GetTenantStats", ks_pb.TenantStatsRequest(tenant_id="acme"),
                      "Bearer " + forge.token(OPERATOR, "knowledge_store")),
                     ("llm_orchestration", "GetModelInfo", llm_pb.ModelInfoRequest(),
                      "Bearer " + forge.token(OPERATOR, "llm_orchestration")),
                     ("rag_pipeline", "ListRankingProfiles", pb.ListRankingProfilesRequest(),
                      f"Bearer {stack.keys['alice']}")]
    for service, method, request, authorization in grpc_controls:
        answer = clients[service].call(service, method, request, authorization)
        fam.check(f"control: {service} gRPC {method} with its accepted credential is served", answer.ok,
                  answer.code.name if not answer.ok else "served")
    tools: dict[str, list[str]] = {}
    for service in SERVICES:
        authorization = (f"Bearer {stack.keys['alice']}" if service == "rag_pipeline"
                         else "Bearer " + forge.token(OPERATOR, service, tenant="acme"))
        with McpHttp(stack.addresses[service]["mcp"], {"Authorization": authorization}) as session:
            init = session.initialize()
            listed = session.request("tools/list", {})
        names = [t["name"] for t in listed.result.get("tools", [])]
        fam.check(f"control: {service} MCP tools/list with its accepted credential is served",
                  init.status == 200 and bool(names), f"{init.describe()}, {len(names)} tools")
        tools[service] = names or MCP_TOOLS[service]
    return tools


def _nothing_took_effect(fam: Family, forge: Forge, ks: Grpc) -> None:
    answer = ks.call("knowledge_store", "GetEntries",
                     ks_pb.GetEntriesRequest(tenant_id="acme", entry_ids=[f"{HR_ONLY}#0", f"{INJECTED}#0"]),
                     "Bearer " + forge.token(OPERATOR, "knowledge_store"))
    ids = sorted(e.entry.artifact_id for e in answer.response.entries) if answer.ok else []
    fam.check("the refused calls changed nothing (restricted artifact still there, nothing injected)",
              answer.ok and ids == [HR_ONLY], f"entries found: {ids}" if answer.ok else answer.code.name)


def run(fam: Family, stack: SecureStack, forge: Forge) -> None:
    clients = {s: Grpc(stack.addresses[s]["grpc"]) for s in SERVICES}
    fam.section = "positive controls and after-check"
    try:
        tools = _controls(fam, stack, forge, clients)
        for service in SERVICES:
            _attack_grpc(fam, clients[service], service, credential_cases(stack, forge, service, "grpc"))
            _attack_mcp(fam, stack.addresses[service]["mcp"], service, tools[service],
                        credential_cases(stack, forge, service, "mcp"))
            _attack_metrics(fam, stack, forge, service, [
                (label, auth) for label, auth in credential_cases(stack, forge, service, "mcp")
                if not label.startswith(f"service token of {OPERATOR} ")])     # operators may read /metrics
        _nothing_took_effect(fam, forge, clients["knowledge_store"])
    finally:
        for client in clients.values():
            client.close()


__all__ = ["INJECTED_CANARY", "credential_cases", "request_for", "run"]
