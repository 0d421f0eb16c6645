"""Signed on-behalf-of assertions between Nucleus stacks: what the receiving stack accepts, and
what a principal made from one may do (tenant of the key, allowed groups only, no role)."""
from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from pydantic import ValidationError

from services.rag_pipeline.federation.assertion import StackSigner
from shared.auth.api_keys import hash_key
from shared.auth.config import AuthConfig
from shared.auth.peer import verify_assertion
from shared.auth.principals import principal_from_access_token
from shared.auth.verifier import NucleusTokenVerifier
from shared.errors import Unauthenticated

KEY = "nrk_peer_" + "x" * 24


@pytest.fixture
def signer(tmp_path: Path) -> StackSigner:
    return StackSigner.load_or_create(tmp_path / "a", "stack-a")


def config(signer: StackSigner, **entry) -> AuthConfig:
    return AuthConfig.model_validate({"version": 1, "api_keys": [{
        "key_id": "k-a", "sha256": hash_key(KEY), "tenant": "peer", "user": "stack_a", "groups": [],
        "peer_stack": "stack-a", "peer_public_key": signer.public_pem(), "peer_groups": ["eng"], **entry}]})


def principal(cfg: AuthConfig, assertion: str | None, stack_id: str = "stack-b"):
    token = NucleusTokenVerifier(cfg).authenticate(KEY)
    headers = {"x-nucleus-assertion": assertion} if assertion is not None else {}
    return principal_from_access_token(token, headers, cfg, stack_id)


def test_the_key_is_made_once_kept_private_and_reloaded(tmp_path: Path, signer: StackSigner):
    path = tmp_path / "a" / "federation" / "stack_assertion.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert StackSigner.load_or_create(tmp_path / "a", "stack-a").public_pem() == signer.public_pem()


def test_an_asserted_user_is_the_peer_stacks_in_the_keys_tenant_with_allowed_groups_and_no_role(signer):
    cfg = config(signer)
    who = principal(cfg, signer.sign(audience="stack-b", user="alice", groups=("eng", "hr", "admin")))
    assert (who.tenant_id, who.user_id, who.groups, who.roles) == ("peer", "alice@stack-a", ("eng",), ())
    assert who.auth_method == "peer_assertion" and who.extra["peer_stack"] == "stack-a"
    assert principal(cfg, None).user_id == "stack_a"           # no assertion: the key itself


@pytest.mark.parametrize("case", ["other_key", "audience", "issuer", "expired", "long", "garbage"])
def test_an_assertion_that_does_not_verify_is_refused_never_served_as_the_key(tmp_path, signer, case):
    cfg = config(signer)
    now = int(time.time())
    if case == "other_key":
        token = StackSigner.load_or_create(tmp_path / "other", "stack-a").sign(audience="stack-b", user="alice")
    elif case == "audience":
        token = signer.sign(audience="stack-x", user="alice")
    elif case == "issuer":
        token = StackSigner(signer._key, "stack-z").sign(audience="stack-b", user="alice")
    elif case in ("expired", "long"):
        iat, exp = (now - 600, now - 300) if case == "expired" else (now, now + 86_400)
        token = jwt.encode({"iss": "stack-a", "aud": "stack-b", "sub": "alice", "iat": iat, "exp": exp},
                           signer._key, algorithm="EdDSA")
    else:
        token = "not.a.jwt"
    with pytest.raises(Unauthenticated):
        principal(cfg, token)


def test_a_stack_without_an_id_accepts_no_assertion(signer):
    with pytest.raises(Unauthenticated):
        verify_assertion(signer.sign(audience="", user="alice"), public_pem=signer.public_pem(), issuer="stack-a",
                         audience="")


def test_a_peer_key_entry_is_checked(signer):
    with pytest.raises(ValidationError, match="go together"):
        config(signer, peer_public_key="")
    with pytest.raises(ValidationError, match="PEM public key"):
        config(signer, peer_public_key="-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ValidationError, match="neither a trusted platform nor has roles"):
        config(signer, roles=["admin"])
