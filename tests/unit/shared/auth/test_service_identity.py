"""shared.auth.service_identity: the stack's key pairs, the tokens services sign, and what a
callee accepts (audience, issuer = key owner, expiry, revocation, who may call whom)."""
from __future__ import annotations

import json
import os
import stat

import jwt
import pytest

from shared.auth.service_identity import (
    ServiceSigner,
    ServiceVerifier,
    ensure_identities,
    key_file,
    list_keys,
    revoke,
    rotate,
)
from shared.auth.verifier import TokenRejected
from shared.errors import PermissionDenied
from shared.identity import OPERATOR, Principal, is_verified_operator, relays_operator

NOW = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ident(tmp_path):
    return ensure_identities(tmp_path / "identity")


def signer(ident, name, clock=None):
    return ServiceSigner.load(ident, name, now=clock or Clock())


def verifier(ident, audience, clock=None):
    return ServiceVerifier(ident, audience, now=clock or Clock(), reload_interval_s=0.0)


def test_identities_are_made_once_with_private_keys_only_their_owner_can_read(ident):
    keys = list_keys(ident)
    assert sorted(k["principal"] for k in keys) == ["knowledge_store", "llm_orchestration", OPERATOR, "rag_pipeline"]
    assert stat.S_IMODE(os.stat(key_file(ident, "rag_pipeline")).st_mode) == 0o600
    assert all("public_key" not in k for k in keys)
    ensure_identities(ident)
    assert list_keys(ident) == keys


def test_a_service_token_stands_for_the_calling_service(ident):
    token = signer(ident, "rag_pipeline").token("knowledge_store")
    p = verifier(ident, "knowledge_store").verify(token)
    assert (p.user_id, p.tenant_id, p.auth_method, p.extra["service"]) == (
        "service:rag_pipeline", "", "service", "rag_pipeline")


def test_an_on_behalf_of_assertion_carries_the_user_but_never_operator_powers(ident):
    user = Principal(tenant_id="acme", user_id="alice", groups=("hr",), session_tags=("department:hr",),
                     roles=("admin", OPERATOR))
    token = signer(ident, "rag_pipeline").token("knowledge_store", user)
    p = verifier(ident, "knowledge_store").verify(token)
    assert (p.tenant_id, p.user_id, p.groups, p.session_tags) == ("acme", "alice", ("hr",), ("department:hr",))
    assert p.auth_method == "on_behalf_of" and p.roles == ("admin",)


def test_the_operator_token_has_the_operator_role(ident):
    p = verifier(ident, "knowledge_store").verify(signer(ident, OPERATOR).token("knowledge_store", tenant="acme"))
    assert p.has_role(OPERATOR) and p.tenant_id == "acme"


def test_a_service_working_for_the_verified_operator_says_so_without_any_role(ident):
    operator = Principal("", OPERATOR, roles=("admin", OPERATOR), auth_method=OPERATOR)
    rag, ks = signer(ident, "rag_pipeline"), verifier(ident, "knowledge_store")
    p = ks.verify(rag.token("knowledge_store", for_operator=is_verified_operator(operator)))
    assert relays_operator(p) and p.roles == () and p.auth_method == "service" and p.user_id == "service:rag_pipeline"
    assert not relays_operator(ks.verify(rag.token("knowledge_store")))          # an ordinary service token
    claims_it = Principal("acme", "mallory", roles=(OPERATOR,), auth_method="api_key")
    assert not is_verified_operator(claims_it)
    assert not relays_operator(ks.verify(rag.token("knowledge_store", claims_it)))    # a user's assertion: never
    key = ServiceSigner.load(ident, "rag_pipeline")._key
    forged = jwt.encode({"iss": "rag_pipeline", "sub": "rag_pipeline", "aud": "knowledge_store", "exp": NOW + 60,
                         "for_operator": "yes"}, key, algorithm="EdDSA", headers={"kid": rag.kid})
    with pytest.raises(TokenRejected, match="for_operator"):
        ks.verify(forged)


def test_a_token_for_another_service_is_refused(ident):
    token = signer(ident, "rag_pipeline").token("llm_orchestration")
    with pytest.raises(TokenRejected) as err:
        verifier(ident, "knowledge_store").verify(token)
    assert err.value.reason == "wrong_audience"


def test_a_service_that_may_not_call_the_callee_is_denied(ident):
    token = signer(ident, "llm_orchestration").token("knowledge_store")
    with pytest.raises(PermissionDenied, match="llm_orchestration may not call knowledge_store"):
        verifier(ident, "knowledge_store").verify(token)


def test_a_key_cannot_sign_as_another_principal(ident):
    head, _, pem = key_file(ident, "rag_pipeline").read_bytes().partition(b"\n")
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(pem, password=None)
    forged = jwt.encode({"iss": OPERATOR, "sub": OPERATOR, "aud": "knowledge_store", "exp": int(NOW + 60)}, key,
                        algorithm="EdDSA", headers={"kid": json.loads(head)["kid"]})
    with pytest.raises(TokenRejected) as err:
        verifier(ident, "knowledge_store").verify(forged)
    assert err.value.reason == "wrong_issuer"


def test_a_tampered_token_does_not_verify(ident):
    token = signer(ident, "rag_pipeline").token("knowledge_store", Principal(tenant_id="acme", user_id="alice"))
    head, payload, sig = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["tenant"] = "globex"
    tampered = ".".join([head, jwt.utils.base64url_encode(json.dumps(claims).encode()).decode(), sig])
    with pytest.raises(TokenRejected) as err:
        verifier(ident, "knowledge_store").verify(tampered)
    assert err.value.reason == "bad_signature"


def test_expired_tokens_are_refused_and_signers_renew_before_expiry(ident):
    clock = Clock()
    s = signer(ident, "rag_pipeline", clock)
    first = s.token("knowledge_store")
    clock.t += 60
    assert s.token("knowledge_store") == first            # cached while most of its life is left
    clock.t += 200
    renewed = s.token("knowledge_store")
    assert renewed != first
    clock.t += 400                                       # the first token is long expired now
    with pytest.raises(TokenRejected) as err:
        verifier(ident, "knowledge_store", clock).verify(first)
    assert err.value.reason == "expired"


def test_the_verified_token_cache_admits_only_the_same_bytes_and_only_until_expiry(ident):
    clock = Clock()
    v = verifier(ident, "knowledge_store", clock)
    token = signer(ident, "rag_pipeline", clock).token("knowledge_store", Principal(tenant_id="acme", user_id="al"))
    assert v.verify(token).tenant_id == "acme"               # verified once, now cached
    head, payload, sig = token.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["tenant"] = "globex"
    other = ".".join([head, jwt.utils.base64url_encode(json.dumps(claims).encode()).decode(), sig])
    with pytest.raises(TokenRejected) as err:               # same signature, other claims: not a cache hit
        v.verify(other)
    assert err.value.reason == "bad_signature"
    clock.t += 60
    assert v.verify(token).tenant_id == "acme"
    clock.t += 200                                           # past its 2-minute life and the leeway
    with pytest.raises(TokenRejected) as err:
        v.verify(token)
    assert err.value.reason == "expired"


def test_a_key_from_outside_the_bundle_is_unknown(ident, tmp_path):
    other = ensure_identities(tmp_path / "other-stack")
    with pytest.raises(TokenRejected) as err:
        verifier(ident, "knowledge_store").verify(signer(other, "rag_pipeline").token("knowledge_store"))
    assert err.value.reason == "unknown_key"


def test_rotation_keeps_the_old_key_until_it_is_revoked_and_revocation_applies_without_restart(ident):
    v = verifier(ident, "knowledge_store")
    old = signer(ident, "rag_pipeline").token("knowledge_store")
    old_kid = jwt.get_unverified_header(old)["kid"]
    assert v.verify(old).extra["service"] == "rag_pipeline"
    new_kid = rotate(ident, "rag_pipeline")
    new = signer(ident, "rag_pipeline").token("knowledge_store")
    assert jwt.get_unverified_header(new)["kid"] == new_kid
    assert v.verify(old) and v.verify(new)
    revoke(ident, old_kid)
    with pytest.raises(TokenRejected) as err:
        v.verify(old)                                     # cached before; the reload drops it
    assert err.value.reason == "unknown_key"
    assert v.verify(new).extra["service"] == "rag_pipeline"
