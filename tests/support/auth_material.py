"""Keys, JWT signing material and an auth config shared by the auth and security unit tests.

The fixtures (`keys`, `config`, `config_file`) are imported by the conftest of each test
package that uses them."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from shared.auth.api_keys import hash_key
from shared.auth.config import AuthConfig

ISSUER = "https://idp.example.test"
AUDIENCE = "https://rag.example.test/mcp"
HS_SECRET = "hs256-shared-secret-for-tests-0123456789abcdef"
ALICE_KEY = "nrk_alice_0123456789abcdefghijklmnopqrstuvwxyz"
PLATFORM_KEY = "nrk_platform_0123456789abcdefghijklmnopqrstuv"
DISABLED_KEY = "nrk_disabled_0123456789abcdefghijklmnopqrstuv"


@dataclass(frozen=True)
class Keys:
    rsa_private_pem: bytes
    rsa_public_pem: str
    other_private_pem: bytes


@pytest.fixture(scope="session")
def keys() -> Keys:
    def pem(k):
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    k1 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    k2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = k1.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return Keys(pem(k1), public, pem(k2))


def config_dict(keys: Keys) -> dict:
    return {
        "version": 1,
        "api_keys": [
            {"key_id": "k-alice", "sha256": hash_key(ALICE_KEY), "tenant": "acme", "user": "alice",
             "groups": ["eng"]},
            {"key_id": "k-platform", "sha256": hash_key(PLATFORM_KEY), "tenant": "acme", "user": "mindset",
             "groups": ["staff"], "trusted_platform": True},
            {"key_id": "k-off", "sha256": hash_key(DISABLED_KEY), "tenant": "acme", "user": "old", "disabled": True},
        ],
        "jwt": {"issuer": ISSUER, "audience": AUDIENCE, "hs256_secret": HS_SECRET,
                "rs256_public_key": keys.rsa_public_pem},
        "tenants": {"acme": {"session_tag_prefixes": ["department:"],
                             "sources": {"legal": {"groups": ["legal"], "name": "Legal docs"}},
                             "users": {"bob@acme.test": {"groups": ["hr"]}}}},
    }


@pytest.fixture
def config(keys) -> AuthConfig:
    return AuthConfig.model_validate(config_dict(keys))


@pytest.fixture
def config_file(tmp_path: Path, keys) -> Path:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(config_dict(keys)))
    return path


def make_jwt(keys: Keys, *, alg: str = "HS256", key=None, **overrides) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "tenant": "acme", "groups": ["eng", "legal"],
              "iat": now, "exp": now + 300}
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    if key is None:
        key = HS_SECRET if alg == "HS256" else keys.rsa_private_pem
    return jwt.encode(claims, key, algorithm=alg)
