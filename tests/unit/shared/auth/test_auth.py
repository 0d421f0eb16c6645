"""API keys and JWTs become principals only when every check passes; platform headers are
honoured only for trusted platform keys."""
from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

from shared.audit import AuditLog, read_records
from shared.auth.api_keys import main
from shared.auth.config import AuthConfig, load_auth_config
from shared.auth.principals import RequestIdentity, principal_from_access_token
from shared.auth.verifier import NucleusTokenVerifier, TokenRejected
from shared.errors import InvalidArgument, Unauthenticated

from tests.support.auth_material import ALICE_KEY, AUDIENCE, DISABLED_KEY, HS_SECRET, ISSUER, PLATFORM_KEY, config_dict, make_jwt


def _reason(verifier: NucleusTokenVerifier, token: str) -> str:
    with pytest.raises(TokenRejected) as err:
        verifier.authenticate(token)
    return err.value.reason


def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


async def test_api_key_maps_to_its_principal_and_the_token_field_holds_no_secret(config):
    token = await NucleusTokenVerifier(config).verify_token(ALICE_KEY)
    assert token is not None
    assert token.client_id == "k-alice" and token.subject == "alice"
    assert token.claims["tenant"] == "acme" and token.claims["groups"] == ["eng"]
    assert ALICE_KEY not in token.model_dump_json()


async def test_unknown_and_disabled_keys_are_refused_and_audited_without_the_key(config, tmp_path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    verifier = NucleusTokenVerifier(config, audit)
    assert await verifier.verify_token("nrk_not_a_key_0123456789abcdefghijkl") is None
    assert await verifier.verify_token(DISABLED_KEY) is None
    records = read_records(tmp_path / "audit.jsonl")
    assert [r["reason"] for r in records] == ["unknown_key", "disabled"]
    assert all(r["decision"] == "deny" for r in records)
    text = (tmp_path / "audit.jsonl").read_text()
    assert "nrk_not_a_key" not in text and DISABLED_KEY not in text


@pytest.mark.parametrize("alg", ["HS256", "RS256"])
def test_valid_jwt_yields_tenant_user_and_groups(config, keys, alg):
    token = NucleusTokenVerifier(config).authenticate(make_jwt(keys, alg=alg))
    assert token.claims["tenant"] == "acme" and token.subject == "carol"
    assert token.claims["groups"] == ["eng", "legal"] and token.claims["auth_method"] == "jwt"
    assert token.resource == AUDIENCE and token.expires_at > time.time()


@pytest.mark.parametrize("overrides,reason", [
    ({"exp": int(time.time()) - 3600}, "expired"),
    ({"aud": "https://someone-else.test/mcp"}, "wrong_audience"),
    ({"iss": "https://evil.test"}, "wrong_issuer"),
    ({"exp": None}, "claims"),
    ({"aud": None}, "claims"),
    ({"tenant": None}, "claims"),
    ({"tenant": "../other"}, "claims"),
])
def test_jwt_with_bad_claims_is_refused(config, keys, overrides, reason):
    assert _reason(NucleusTokenVerifier(config), make_jwt(keys, **overrides)) == reason


def test_jwt_signed_with_another_secret_or_key_is_refused(config, keys):
    verifier = NucleusTokenVerifier(config)
    assert _reason(verifier, make_jwt(keys, key="another-secret-of-sufficient-length-0123456789")) == "bad_signature"
    assert _reason(verifier, make_jwt(keys, alg="RS256", key=keys.other_private_pem)) == "bad_signature"


def test_alg_none_and_unexpected_algorithms_are_refused_before_decoding(config, keys):
    verifier = NucleusTokenVerifier(config)
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "tenant": "acme", "exp": now + 300}
    unsigned = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."
    assert _reason(verifier, unsigned) == "algorithm"
    assert _reason(verifier, jwt.encode(claims, HS_SECRET * 2, algorithm="HS384")) == "algorithm"


def test_rs256_public_key_cannot_be_used_as_an_hmac_secret(keys):
    raw = config_dict(keys)
    raw["jwt"].pop("hs256_secret")
    verifier = NucleusTokenVerifier(AuthConfig.model_validate(raw))
    now = int(time.time())
    forged = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "m", "tenant": "acme", "exp": now + 60},
                        b"x" * 64, algorithm="HS256")
    assert _reason(verifier, forged) == "algorithm"


def test_garbage_tokens_are_refused(config):
    verifier = NucleusTokenVerifier(config)
    for token in ("", "a.b.c", "x" * 20_000, "Bearer " + ALICE_KEY):
        with pytest.raises(TokenRejected):
            verifier.authenticate(token)


def test_platform_headers_are_ignored_for_an_ordinary_key(config):
    token = NucleusTokenVerifier(config).authenticate(ALICE_KEY)
    who = principal_from_access_token(token, {"x-user-id": "ceo@acme.test", "x-session-tags": '["department:x"]'},
                                      config)
    assert who.user_id == "alice" and who.groups == ("eng",) and who.session_tags == ()
    assert who.extra["ignored_headers"] == "x-user-id,x-session-tags"


def test_trusted_platform_acts_for_x_user_id_within_its_own_tenant(config):
    token = NucleusTokenVerifier(config).authenticate(PLATFORM_KEY)
    listed = principal_from_access_token(
        token, {"x-user-id": "bob@acme.test", "x-session-tags": '["department:sales", "Q4"]'}, config)
    assert (listed.tenant_id, listed.user_id, listed.groups) == ("acme", "bob@acme.test", ("hr",))
    assert listed.session_tags == ("department:sales", "Q4") and listed.extra["acting_for"] == "1"
    unlisted = principal_from_access_token(token, {"x-user-id": "zed@acme.test"}, config)
    assert unlisted.user_id == "zed@acme.test" and unlisted.groups == ("staff",)
    itself = principal_from_access_token(token, {}, config)
    assert itself.user_id == "mindset"


@pytest.mark.parametrize("header", ["department:sales", '{"a": 1}', "[1, 2]", "[\"\"]", "not json"])
def test_malformed_session_tags_from_a_platform_are_refused_not_ignored(config, header):
    token = NucleusTokenVerifier(config).authenticate(PLATFORM_KEY)
    with pytest.raises(InvalidArgument) as err:
        principal_from_access_token(token, {"x-session-tags": header}, config)
    assert "x-session-tags" in str(err.value)


def test_request_identity_uses_the_sdk_auth_context_and_refuses_no_identity_over_http(config):
    identity = RequestIdentity(config, allow_local=False)
    with pytest.raises(Unauthenticated):
        identity.principal({})
    token = NucleusTokenVerifier(config).authenticate(PLATFORM_KEY)
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        who = identity.principal({"X-User-Id": "bob@acme.test"})
    finally:
        auth_context_var.reset(reset)
    assert who.user_id == "bob@acme.test"
    assert RequestIdentity(None, allow_local=True).principal(None).auth_method == "local"


def test_user_token_must_be_valid_and_of_the_callers_tenant(config, keys):
    identity = RequestIdentity(config, allow_local=True)
    caller = identity.principal(None)
    caller_acme = type(caller)(tenant_id="acme", user_id="platform")
    assert identity.principal_for_user_token(make_jwt(keys), caller_acme).user_id == "carol"
    with pytest.raises(TokenRejected) as err:
        identity.principal_for_user_token(make_jwt(keys, exp=int(time.time()) - 600), caller_acme)
    assert err.value.reason == "expired"
    with pytest.raises(TokenRejected) as err:
        identity.principal_for_user_token(make_jwt(keys, tenant="globex"), caller_acme)
    assert err.value.reason == "tenant"


@pytest.mark.parametrize("mutate,field", [
    (lambda c: c["jwt"].update(hs256_secret="short"), "hs256_secret"),
    (lambda c: c["api_keys"][0].update(sha256="not-hex"), "sha256"),
    (lambda c: c["api_keys"][0].update(tenant="bad tenant"), "tenant"),
    (lambda c: c["api_keys"][0].update(groups=["a,b"]), "groups"),
    (lambda c: c.update(unexpected=True), "unexpected"),
    (lambda c: c["api_keys"].append(dict(c["api_keys"][0])), "unique"),
])
def test_config_errors_name_the_problem(tmp_path, keys, mutate, field):
    raw = config_dict(keys)
    mutate(raw)
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InvalidArgument) as err:
        load_auth_config(path)
    assert field in str(err.value) and str(path) in str(err.value)


def test_new_key_prints_the_key_once_and_stores_only_its_hash(tmp_path, capsys):
    path = tmp_path / "auth.json"
    assert main(["new-key", "--config", str(path), "--tenant", "acme", "--user", "dana", "--groups", "eng,ops",
                 "--trusted-platform", "--key-id", "k-dana"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("nrk_") and key not in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    config = load_auth_config(path)
    token = NucleusTokenVerifier(config).authenticate(key)
    assert token.claims["trusted_platform"] is True and token.claims["groups"] == ["eng", "ops"]
    assert main(["new-key", "--config", str(path), "--tenant", "acme", "--user", "erin"]) == 0
    assert len(load_auth_config(path).api_keys) == 2
