"""A second real stack with authentication on (NUCLEUS_RAG_REQUIRE_AUTH=1), shared by the RAG
tool, security and Inspector tests: API keys and JWT material made fresh per run, the demo
corpus plus a few marked documents in tenant `acme`, and a canary tenant `globex`.

    principal   credential                    tenant  groups
    alice       API key                       acme    -
    sec         API key                       acme    security-team, legal
    eng         API key                       acme    engineering
    platform    API key, trusted_platform     acme    -       (acts for x-user-id)
    gina        API key                       globex  -
    carol       JWT (HS256 or RS256)          acme    from the `groups` claim

Auth config rules for acme: source `engineering-wiki` is restricted to group `engineering`,
session tags starting with `department:` restrict results, and `hr-hank@acme.test` is in `hr`.
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cli.supervisor import Supervisor
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from shared.auth.api_keys import hash_key

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "corpus"
ISSUER = "https://idp.itest.example"
AUDIENCE = "nucleus-rag-itest"
GLOBEX_CANARY = "CANARYGLOBEX9042"
LEGAL_CANARY = "CANARYLEGAL5521"
USERS = {"alice": ("acme", []), "sec": ("acme", ["security-team", "legal"]), "eng": ("acme", ["engineering"]),
         "gina": ("globex", [])}
SECURITY_TEAM_DOCS = {"security-incident-response-policy-2026", "security-runbook-pallas-fleet-compromise",
                      "security-postmortem-2025-credential-leak"}


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


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory) -> SecureStack:
    data_dir = tmp_path_factory.mktemp("secure-stack")
    keys = {name: f"nrk_{name}_{secrets.token_urlsafe(24)}" for name in (*USERS, "platform")}
    hs_secret = secrets.token_urlsafe(48)
    signing_key, other_key = _rsa(), _rsa()
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    config = {
        "version": 1,
        "api_keys": [
            *({"key_id": f"k-{n}", "sha256": hash_key(keys[n]), "tenant": t, "user": n, "groups": g}
              for n, (t, g) in USERS.items()),
            {"key_id": "k-platform", "sha256": hash_key(keys["platform"]), "tenant": "acme", "user": "platform",
             "groups": [], "trusted_platform": True},
        ],
        "jwt": {"issuer": ISSUER, "audience": [AUDIENCE], "hs256_secret": hs_secret, "rs256_public_key": public_pem},
        "tenants": {"acme": {"session_tag_prefixes": ["department:"],
                             "sources": {"engineering-wiki": {"groups": ["engineering"], "name": "Engineering wiki"}},
                             "users": {"hr-hank@acme.test": {"groups": ["hr"]}}}},
    }
    auth_path = data_dir / "auth.json"
    auth_path.write_text(json.dumps(config))
    link_secret = secrets.token_urlsafe(32)
    audit = data_dir / "audit" / "audit.jsonl"
    supervisor = Supervisor(data_dir, ephemeral_ports=True, extra_env={
        "NUCLEUS_RAG_REQUIRE_AUTH": "1", "NUCLEUS_RAG_AUTH_CONFIG": str(auth_path),
        "NUCLEUS_RAG_LINK_SECRET": link_secret, "NUCLEUS_RAG_AUDIT_LOG": str(audit),
        "NUCLEUS_LOCAL_TENANT": "local-only"})
    addresses = supervisor.start(timeout_s=240)
    mcp_url = addresses["rag_pipeline"]["mcp"]
    stack = SecureStack(addresses=addresses, mcp_url=mcp_url, base_url=mcp_url.removesuffix("/mcp"), keys=keys,
                        hs_secret=hs_secret, rsa_private_pem=_pem(signing_key), other_rsa_private_pem=_pem(other_key),
                        link_secret=link_secret, auth_config=auth_path, audit_log=audit,
                        log_dir=supervisor.run_dir)
    yield stack
    supervisor.stop()


@pytest.fixture(scope="session")
async def secure_corpus(secure_stack):
    """The corpus above, ingested once."""
    from shared.documents import iter_paths, load_document

    client = KnowledgeStoreClient(secure_stack.addresses["knowledge_store"]["grpc"])
    try:
        demo = [load_document(p) for p in iter_paths(DEMO)]
        await client.ingest("acme", "", [*demo, *extra_documents()])
        await client.ingest("globex", "", globex_documents())
    finally:
        await client.close()
    return secure_stack


def get(url: str, **kw) -> httpx.Response:
    return httpx.get(url, timeout=30, **kw)
