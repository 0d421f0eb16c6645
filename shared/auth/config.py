"""The auth config: the JSON file at settings.auth_config (format in docs/MCP.md).

    AuthConfig          API keys (hashes only), the JWT settings, per-tenant rules
    load_auth_config()  parse and validate the file; errors name the file and the field
    EMPTY_CONFIG        no keys, no JWT, no rules

Also the rules every credential's fields follow (GROUP_NAME, CONTROL_CHARS, MAX_USER_CHARS;
the tenant id rule is `shared.identity.TENANT_ID`; ROLES, the roles a credential may carry),
shared by the verifier and the principal resolution.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from shared.errors import InvalidArgument
from shared.identity import ADMIN, TENANT_ID, TENANT_ID_RULE
from shared.redaction import register_secret

MAX_USER_CHARS = 256
# Same rule as the KnowledgeStore's tenant ids.
GROUP_NAME = re.compile(r"^[^\s,\x00-\x1f\x7f]{1,256}$")      # no commas: links carry groups comma-joined
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
#: The roles a key entry, a listed user or a JWT may carry ("admin": tenant-wide changes).
ROLES = (ADMIN,)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_roles(roles: list[str]) -> list[str]:
    for r in roles:
        if r not in ROLES:
            raise ValueError(f"role {r!r} is not one of {', '.join(ROLES)}")
    return sorted(set(roles))


def _check_groups(groups: list[str]) -> list[str]:
    for g in groups:
        if not GROUP_NAME.match(g):
            raise ValueError(f"group {g!r}: 1-256 characters, no spaces, commas or control characters")
    return sorted(set(groups))


class _GroupsAndRoles(_Strict):
    """Groups and roles of a principal, each checked against its rules."""

    groups: list[str] = Field(default_factory=list)
    roles: list[str] = Field(default_factory=list, description="e.g. [\"admin\"]: tenant-wide changes")

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return _check_groups(v)

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        return _check_roles(v)


class ApiKeyEntry(_GroupsAndRoles):
    key_id: str = Field(min_length=1, max_length=128)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key; the key is never stored")
    tenant: str
    user: str = Field(min_length=1, max_length=MAX_USER_CHARS)
    trusted_platform: bool = False
    disabled: bool = False
    created: str = ""
    # A peer Nucleus stack's key (shared/auth/peer.py): its users come as signed assertions.
    peer_stack: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$")
    peer_public_key: str = Field(default="", max_length=4_096)
    peer_groups: list[str] = Field(default_factory=list)

    @field_validator("peer_groups")
    @classmethod
    def _peer_groups(cls, v: list[str]) -> list[str]:
        return _check_groups(v)

    @model_validator(mode="after")
    def _peer(self) -> "ApiKeyEntry":
        if bool(self.peer_stack) != bool(self.peer_public_key):
            raise ValueError("peer_stack and peer_public_key go together (a peer stack's id and its public key)")
        if self.peer_public_key:
            from shared.auth.peer import check_public_key

            check_public_key(self.peer_public_key)
        if self.peer_stack and (self.trusted_platform or self.roles):
            raise ValueError("a peer stack's key is neither a trusted platform nor has roles")
        return self

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        if not TENANT_ID.match(v):
            raise ValueError(f"tenant {v!r}: {TENANT_ID_RULE}")
        return v


class JwtConfig(_Strict):
    issuer: str = Field(min_length=1)
    audience: list[str] = Field(min_length=1, description="accepted `aud` values, e.g. the MCP URL")
    hs256_secret: SecretStr | None = None
    rs256_public_key: str | None = None          # PEM text
    rs256_public_key_file: Path | None = None    # or a PEM file
    tenant_claim: str = "tenant"
    user_claim: str = "sub"
    groups_claim: str = "groups"
    roles_claim: str = "roles"                   # a list of strings; roles other than ROLES are ignored
    leeway_s: int = Field(default=30, ge=0, le=300)

    @field_validator("audience", mode="before")
    @classmethod
    def _audience(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _keys(self) -> "JwtConfig":
        if self.hs256_secret is None and not self.rs256_public_key and self.rs256_public_key_file is None:
            raise ValueError("jwt needs hs256_secret and/or rs256_public_key(_file)")
        if self.hs256_secret is not None and len(self.hs256_secret.get_secret_value().encode()) < 32:
            raise ValueError("jwt.hs256_secret must be at least 32 bytes (RFC 7518 §3.2)")
        return self


class SourceRule(_Strict):
    """A source-level ACL on top of the artifacts' own visibility groups (seed 000 dataSources)."""

    groups: list[str] = Field(default_factory=list)   # empty = every principal of the tenant
    name: str = ""

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return _check_groups(v)


class UserRule(_GroupsAndRoles):
    """A user a trusted platform may act for: its groups and roles (none unless listed)."""


class TenantRules(_Strict):
    # A session tag starting with one of these prefixes restricts results to artifacts carrying
    # at least one of the session's restricting tags (see docs/MCP.md, "Session tags").
    session_tag_prefixes: list[str] = Field(default_factory=list)
    sources: dict[str, SourceRule] = Field(default_factory=dict)
    users: dict[str, UserRule] = Field(default_factory=dict)


class AuthConfig(_Strict):
    version: Literal[1] = 1
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)
    jwt: JwtConfig | None = None
    tenants: dict[str, TenantRules] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique(self) -> "AuthConfig":
        ids = [k.key_id for k in self.api_keys]
        if len(ids) != len(set(ids)):
            raise ValueError("api_keys: key_id values must be unique")
        hashes = [k.sha256 for k in self.api_keys]
        if len(hashes) != len(set(hashes)):
            raise ValueError("api_keys: two entries have the same key hash")
        return self

    def rules(self, tenant_id: str) -> TenantRules:
        return self.tenants.get(tenant_id) or _NO_RULES


_NO_RULES = TenantRules()
EMPTY_CONFIG = AuthConfig()


def load_auth_config(path: Path) -> AuthConfig:
    """Parse and validate the auth config; errors name the file and the field."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidArgument("auth_config", f"{path} does not exist") from None
    except (OSError, ValueError) as err:
        raise InvalidArgument("auth_config", f"{path} is not readable JSON: {err}") from None
    try:
        config = AuthConfig.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise InvalidArgument("auth_config", f"{path}: {problems}") from None
    if config.jwt is not None and config.jwt.hs256_secret is not None:
        register_secret(config.jwt.hs256_secret.get_secret_value())
    return config


__all__ = [
    "ApiKeyEntry", "JwtConfig", "SourceRule", "UserRule", "TenantRules", "AuthConfig", "EMPTY_CONFIG",
    "load_auth_config", "MAX_USER_CHARS", "GROUP_NAME", "CONTROL_CHARS", "ROLES",
]
