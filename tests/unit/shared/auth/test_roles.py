"""Roles come from the auth config's key entries and from a JWT `roles` claim, are validated, and
never pass from a trusted platform's key to the users it acts for."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.auth.api_keys import hash_key
from shared.auth.config import AuthConfig
from shared.auth.principals import principal_from_access_token
from shared.auth.verifier import NucleusTokenVerifier, TokenRejected
from shared.identity import ADMIN

from tests.support.auth_material import ALICE_KEY, config_dict, make_jwt

ADMIN_KEY = "nrk_admin_0123456789abcdefghijklmnopqrstuvwxyz"
ADMIN_PLATFORM_KEY = "nrk_adminplatform_0123456789abcdefghijklmnop"


@pytest.fixture
def role_config(keys) -> AuthConfig:
    raw = config_dict(keys)
    raw["api_keys"] += [
        {"key_id": "k-admin", "sha256": hash_key(ADMIN_KEY), "tenant": "acme", "user": "ada", "roles": ["admin"]},
        {"key_id": "k-admin-platform", "sha256": hash_key(ADMIN_PLATFORM_KEY), "tenant": "acme",
         "user": "platform", "roles": ["admin"], "trusted_platform": True},
    ]
    raw["tenants"]["acme"]["users"]["boss@acme.test"] = {"groups": ["hr"], "roles": ["admin"]}
    return AuthConfig.model_validate(raw)


def _principal(config: AuthConfig, token: str, headers: dict[str, str] | None = None):
    return principal_from_access_token(NucleusTokenVerifier(config).authenticate(token), headers, config)


def test_a_key_entry_with_the_admin_role_gives_it_to_its_principal_and_others_have_none(role_config):
    assert _principal(role_config, ADMIN_KEY).roles == (ADMIN,)
    assert _principal(role_config, ALICE_KEY).roles == ()


def test_an_unknown_role_in_the_config_is_refused_naming_the_field(keys):
    raw = config_dict(keys)
    raw["api_keys"][0]["roles"] = ["superuser"]
    with pytest.raises(ValidationError) as err:
        AuthConfig.model_validate(raw)
    assert "roles" in str(err.value) and "superuser" in str(err.value)


def test_jwt_roles_claim_gives_known_roles_only(role_config, keys):
    assert _principal(role_config, make_jwt(keys, roles=["admin", "billing"])).roles == (ADMIN,)
    assert _principal(role_config, make_jwt(keys)).roles == ()


def test_a_malformed_jwt_roles_claim_is_refused(role_config, keys):
    with pytest.raises(TokenRejected) as err:
        NucleusTokenVerifier(role_config).authenticate(make_jwt(keys, roles={"admin": True}))
    assert err.value.reason == "claims" and "roles" in str(err.value)


def test_a_platform_keys_roles_never_pass_to_the_users_it_acts_for(role_config):
    acting = _principal(role_config, ADMIN_PLATFORM_KEY, {"x-user-id": "mallory@acme.test"})
    assert acting.user_id == "mallory@acme.test" and acting.roles == ()
    listed = _principal(role_config, ADMIN_PLATFORM_KEY, {"x-user-id": "boss@acme.test"})
    assert listed.roles == (ADMIN,) and listed.groups == ("hr",)
