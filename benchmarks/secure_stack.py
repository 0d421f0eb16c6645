"""A real stack with authentication on every port (NUCLEUS_RAG_REQUIRE_AUTH=1), built for the
attack suite (`nucleus attack`, benchmarks/attacks) and the secure integration tests: API keys
and JWT material made fresh per run, the stack's service key pairs made by the supervisor, the
demo corpus plus a few marked documents in tenant `acme` (ingested with the operator key), and
a canary tenant `globex`.

    principal   credential                    tenant  groups
    alice       API key                       acme    -
    sec         API key                       acme    security-team, legal
    eng         API key                       acme    engineering
    platform    API key, trusted_platform     acme    -       (acts for x-user-id)
    retired     API key, disabled             acme    -       (refused everywhere)
    gina        API key                       globex  -
    carol       JWT (HS256 or RS256)          acme    from the `groups` claim

Auth config rules for acme: source `engineering-wiki` is restricted to group `engineering`,
session tags starting with `department:` restrict results, and `hr-hank@acme.test` is in `hr`.

    stack, supervisor = start_secure_stack(data_dir)     # services up, nothing ingested
    await ingest_corpus(stack)                           # corpus() into acme and globex
    supervisor.stop()

The credentials stay in `<data_dir>/attack.json` (mode 0600, beside the auth config): while the
stack runs, `running_secure_stack(data_dir)` opens it again (`nucleus attack --use-running`).
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cli.supervisor import Supervisor
from services.knowledge_store.client import KnowledgeStoreClient
from shared.auth.api_keys import hash_key
from shared.auth.service_auth import operator_interceptors
from shared.errors import NotFound, Unavailable
from shared.records import ArtifactMeta, DocumentIn

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "corpus"
ISSUER = "https://idp.itest.example"
AUDIENCE = "nucleus-rag-itest"
GLOBEX_CANARY = "CANARYGLOBEX9042"
LEGAL_CANARY = "CANARYLEGAL5521"
CREDENTIALS = "attack.json"      # the principals' credentials, in the stack's data directory
USERS = {"alice": ("acme", []), "sec": ("acme", ["security-team", "legal"]), "eng": ("acme", ["engineering"]),
         "gina": ("globex", [])}
PLATFORM = "platform"
RETIRED = "retired"          # a disabled API key (tenant acme): refused everywhere
SECURITY_TEAM_DOCS = {"security-incident-response-policy-2026", "security-runbook-pallas-fleet-compromise",
                      "security-postmortem-2025-credential-leak"}
#: The acme rules of the auth config (also the attack suite's model of who may see what).
ACME_RULES: dict[str, Any] = {
    "session_tag_prefixes": ["department:"],
    "sources": {"engineering-wiki": {"groups": ["engineering"], "name": "Engineering wiki"}},
    "users": {"hr-hank@acme.test": {"groups": ["hr"]}},
}


@dataclass
class SecureStack:
    addresses: dict
    mcp_url: str
    base_url: str
    keys: dict[str, str]          # principal -> API key
    hs_secret: str
    rsa_private_pem: bytes
    other_rsa_private_pem: bytes
    link_secret: str
    auth_config: Path
    audit_log: Path
    log_dir: Path
    identity_dir: Path            # the stack's key pairs and trust bundle (made by the supervisor)

    def operator(self, callee: str) -> list:
        """Client interceptors that sign calls to `callee` with the operator key."""
        return operator_interceptors(self.identity_dir, callee)

    def headers(self, who: str, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}", **extra}

    def jwt(self, *, alg: str = "HS256", key=None, **overrides) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "tenant": "acme", "groups": [],
                  "iat": now, "exp": now + 600}
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        if key is None:
            key = self.hs_secret if alg.startswith("HS") else self.rsa_private_pem
        return jwt.encode(claims, key, algorithm=alg)

    def secrets(self) -> list[str]:
        return [*self.keys.values(), self.hs_secret, self.link_secret]

    @property
    def data_dir(self) -> Path:
        return self.auth_config.parent

    def credentials(self) -> dict[str, Any]:
        """What `running_secure_stack` needs besides the addresses (secrets included: a 0600 file)."""
        return {"keys": self.keys, "hs_secret": self.hs_secret, "rsa_private_pem": self.rsa_private_pem.decode(),
                "other_rsa_private_pem": self.other_rsa_private_pem.decode(), "link_secret": self.link_secret,
                "audit_log": str(self.audit_log), "identity_dir": str(self.identity_dir)}


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def extra_documents() -> list[DocumentIn]:
    now = int(time.time())

    def doc(aid: str, title: str, source: str, body: str, *, tags=(), groups=()) -> DocumentIn:
        return DocumentIn(artifact=ArtifactMeta(
            artifact_id=aid, title=title, source_type="policy", source_id=source,
            source_uri=f"https://intranet.acme.example/{aid}", file_name=f"{aid}.md", file_type="md",
            created_unix=now - 86_400, modified_unix=now - 3_600, tags=tuple(tags), visibility_groups=tuple(groups),
            reputation_prior=0.8), content=body, content_type="text/markdown")

    return [
        doc("legal-hotel-settlement", "Legal: hotel expense settlement", "legal",
            f"# Hotel expense settlement\n\nConfidential {LEGAL_CANARY}. The travel hotel expense limits were "
            "challenged in court; the settlement raises hotel limits for executives.", groups=["legal"]),
        doc("sales-travel-playbook", "Sales travel playbook", "sales",
            "# Sales travel playbook\n\nSales staff book hotels through the travel desk; hotel expense limits "
            "follow the travel policy, with client dinners reimbursed up to the meal limit.",
            tags=["department:sales", "travel"]),
        doc("engineering-travel-note", "Engineering travel note", "engineering-notes",
            "# Engineering travel\n\nEngineers travelling to customer sites book hotels within the travel "
            "policy hotel expense limits and file receipts within 30 days.",
            tags=["department:engineering", "travel"]),
    ]


def globex_documents() -> list[DocumentIn]:
    body = (f"# Globex travel policy\n\n{GLOBEX_CANARY}: Globex hotel expense limits for travel are 999 USD per "
            "night; meals and per-diem follow the Globex expense policy. Reset the battery controller with "
            "the Globex tool. Security incident reporting at Globex goes to the SOC.")
    return [DocumentIn(artifact=ArtifactMeta(artifact_id="globex-travel", title="Globex travel policy",
                                             source_type="policy", source_id="product-docs",
                                             source_uri="https://globex.example/travel", file_name="travel.md",
                                             file_type="md", created_unix=int(time.time()) - 10),
                       content=body, content_type="text/markdown")]


def corpus() -> dict[str, list[DocumentIn]]:
    """Every document of the stack, by tenant: the demo corpus and the extras in acme, the canary in globex."""
    from shared.documents import iter_paths, load_document

    return {"acme": [*(load_document(p) for p in iter_paths(DEMO)), *extra_documents()],
            "globex": globex_documents()}


def auth_config(keys: dict[str, str], hs_secret: str, rs256_public_pem: str) -> dict[str, Any]:
    """The auth config of the principals above (API keys stored as hashes only)."""
    return {
        "version": 1,
        "api_keys": [
            *({"key_id": f"k-{n}", "sha256": hash_key(keys[n]), "tenant": t, "user": n, "groups": g}
              for n, (t, g) in USERS.items()),
            {"key_id": f"k-{PLATFORM}", "sha256": hash_key(keys[PLATFORM]), "tenant": "acme", "user": PLATFORM,
             "groups": [], "trusted_platform": True},
            {"key_id": f"k-{RETIRED}", "sha256": hash_key(keys[RETIRED]), "tenant": "acme", "user": RETIRED,
             "groups": [], "disabled": True},
        ],
        "jwt": {"issuer": ISSUER, "audience": [AUDIENCE], "hs256_secret": hs_secret,
                "rs256_public_key": rs256_public_pem},
        "tenants": {"acme": ACME_RULES},
    }


def start_secure_stack(data_dir: Path, *, extra_env: dict[str, str] | None = None,
                       timeout_s: float = 240.0, mode: str | None = None) -> tuple[SecureStack, Supervisor]:
    """Fresh credentials and auth config in `data_dir`, and the three services started with
    authentication on every port (`mode`: "split" or "single", None = $NUCLEUS_MODE or split).
    The caller stops the returned supervisor."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    keys = {name: f"nrk_{name}_{secrets.token_urlsafe(24)}" for name in (*USERS, PLATFORM, RETIRED)}
    hs_secret = secrets.token_urlsafe(48)
    signing_key, other_key = _rsa(), _rsa()
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    auth_path = data_dir / "auth.json"
    auth_path.write_text(json.dumps(auth_config(keys, hs_secret, public_pem)))
    auth_path.chmod(0o600)
    link_secret = secrets.token_urlsafe(32)
    audit = data_dir / "audit" / "audit.jsonl"
    supervisor = Supervisor(data_dir, ephemeral_ports=True, extra_env={
        "NUCLEUS_RAG_REQUIRE_AUTH": "1", "NUCLEUS_RAG_AUTH_CONFIG": str(auth_path),
        "NUCLEUS_RAG_LINK_SECRET": link_secret, "NUCLEUS_RAG_AUDIT_LOG": str(audit),
        "NUCLEUS_LOCAL_TENANT": "local-only", **(extra_env or {})}, mode=mode)
    addresses = supervisor.start(timeout_s=timeout_s)
    mcp_url = addresses["rag_pipeline"]["mcp"]
    stack = SecureStack(addresses=addresses, mcp_url=mcp_url, base_url=mcp_url.removesuffix("/mcp"), keys=keys,
                        hs_secret=hs_secret, rsa_private_pem=_pem(signing_key), other_rsa_private_pem=_pem(other_key),
                        link_secret=link_secret, auth_config=auth_path, audit_log=audit,
                        log_dir=supervisor.run_dir, identity_dir=supervisor.identity_dir)
    credentials = data_dir / CREDENTIALS
    credentials.write_text(json.dumps(stack.credentials()))
    credentials.chmod(0o600)
    return stack, supervisor


def running_secure_stack(data_dir: Path) -> SecureStack:
    """The secure stack `start_secure_stack(data_dir)` started and that still runs: its addresses from
    `<data_dir>/run/stack.json` (checked healthy as `nucleus bench --use-running` checks them), its
    credentials from `<data_dir>/attack.json`."""
    from benchmarks.stack import running_stack

    data_dir = Path(data_dir)
    stack = running_stack(data_dir)
    try:
        saved = json.loads((data_dir / CREDENTIALS).read_text())
    except (OSError, ValueError) as err:
        raise Unavailable(f"the stack in {data_dir} has no readable {CREDENTIALS} ({err}): a running stack "
                          "can be attacked only if the attack suite's secure start (benchmarks.secure_stack) "
                          "started it, as its principals' credentials are made there") from None
    mcp_url = stack.services["rag_pipeline"]["mcp"]
    return SecureStack(addresses=stack.services, mcp_url=mcp_url, base_url=mcp_url.removesuffix("/mcp"),
                       keys=saved["keys"], hs_secret=saved["hs_secret"],
                       rsa_private_pem=saved["rsa_private_pem"].encode(),
                       other_rsa_private_pem=saved["other_rsa_private_pem"].encode(),
                       link_secret=saved["link_secret"], auth_config=data_dir / "auth.json",
                       audit_log=Path(saved["audit_log"]), log_dir=data_dir / "run",
                       identity_dir=Path(saved["identity_dir"]))


async def ingest_corpus(stack: SecureStack, documents: dict[str, list[DocumentIn]] | None = None, *,
                        missing_only: bool = False) -> None:
    """Ingest `documents` (default `corpus()`) tenant by tenant with the operator credential;
    `missing_only`: only those whose first entry the store does not hold (a running stack)."""
    client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                  interceptors=stack.operator("knowledge_store"))
    try:
        for tenant, docs in (documents or corpus()).items():
            if missing_only:
                try:
                    held = {h.artifact.artifact_id for h in await client.get_entries(
                        tenant, [f"{d.artifact.artifact_id}#0" for d in docs])}
                except NotFound:          # nothing ingested in the tenant yet
                    held = set()
                docs = [d for d in docs if d.artifact.artifact_id not in held]
            if docs:
                await client.ingest(tenant, "", docs)
    finally:
        await client.close()


__all__ = [
    "ACME_RULES", "AUDIENCE", "CREDENTIALS", "DEMO", "GLOBEX_CANARY", "ISSUER", "LEGAL_CANARY", "PLATFORM", "RETIRED",
    "ROOT", "SECURITY_TEAM_DOCS", "USERS", "SecureStack", "auth_config", "corpus", "extra_documents",
    "globex_documents", "ingest_corpus", "running_secure_stack", "start_secure_stack",
]
