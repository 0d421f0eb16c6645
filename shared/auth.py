"""Bearer authentication for MCP over HTTP: static API keys and JWTs become verified principals.

    AuthConfig              the JSON file at settings.auth_config (format in docs/MCP.md)
    NucleusTokenVerifier    the MCP SDK's TokenVerifier: bearer token -> AccessToken | None
    RequestIdentity         AccessToken (+ x-user-id / x-session-tags headers) -> Principal
    auth_settings()         the SDK's AuthSettings for this server
    python -m shared.auth new-key --tenant T --user U [--groups a,b] [--trusted-platform]

API keys are stored only as SHA-256 hashes; the key itself is printed once when it is made.
JWTs are verified with PyJWT: signature (HS256 shared secret and/or RS256 public key, nothing
else — `alg: none` and every other algorithm are refused before any decoding), issuer,
expiry (`exp` required), audience, and the tenant / user / groups claims.

The SDK's bearer middleware calls `verify_token` and answers HTTP 401 before any tool runs
when it returns None. Tools then turn the verified AccessToken into a `Principal`:

- an ordinary credential: tenant, user and groups from the key entry or the JWT claims;
  `x-user-id` / `x-session-tags` headers are IGNORED (and the audit record says so);
- a key marked `trusted_platform` (a chat platform acting for its users, seed 002): the user
  is `x-user-id` (always within the key's tenant), the groups are that user's entry under
  `tenants.<tenant>.users` in the config, else the key's own groups, and the session tags
  are the JSON array in `x-session-tags` (a malformed header is refused, never ignored).

Secrets never leave this module: AccessToken.token holds a fingerprint, not the token, and
failures are logged and audited by reason only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Literal

import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from shared.audit import AuditEvent, AuditLog
from shared.errors import InvalidArgument, Unauthenticated
from shared.identity import Principal, current_principal
from shared.log import register_secret

log = logging.getLogger(__name__)

KEY_PREFIX = "nrk_"                      # "nucleus rag key": makes keys recognisable in leaks
API_KEY_ISSUER = "nucleus-api-key"       # the `iss` of AccessTokens made from API keys
ALGORITHMS = ("HS256", "RS256")          # the only JWT algorithms ever accepted
MAX_TOKEN_CHARS = 16_384
MAX_USER_CHARS = 256
MAX_SESSION_TAGS = 64
MAX_TAG_CHARS = 256
HEADER_USER = "x-user-id"
HEADER_TAGS = "x-session-tags"
HEADER_HUMAN = "x-human-uid"
# Same rule as the KnowledgeStore's tenant ids.
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GROUP = re.compile(r"^[^\s,\x00-\x1f\x7f]{1,256}$")      # no commas: links carry groups comma-joined
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# ---------------------------------------------------------------------------- config file
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_groups(groups: list[str]) -> list[str]:
    for g in groups:
        if not _GROUP.match(g):
            raise ValueError(f"group {g!r}: 1-256 characters, no spaces, commas or control characters")
    return sorted(set(groups))


class ApiKeyEntry(_Strict):
    key_id: str = Field(min_length=1, max_length=128)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key; the key is never stored")
    tenant: str
    user: str = Field(min_length=1, max_length=MAX_USER_CHARS)
    groups: list[str] = Field(default_factory=list)
    trusted_platform: bool = False
    disabled: bool = False
    created: str = ""

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        if not _TENANT.match(v):
            raise ValueError(f"tenant {v!r}: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit")
        return v

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return _check_groups(v)


class JwtConfig(_Strict):
    issuer: str = Field(min_length=1)
    audience: list[str] = Field(min_length=1, description="accepted `aud` values, e.g. the MCP URL")
    hs256_secret: SecretStr | None = None
    rs256_public_key: str | None = None          # PEM text
    rs256_public_key_file: Path | None = None    # or a PEM file
    tenant_claim: str = "tenant"
    user_claim: str = "sub"
    groups_claim: str = "groups"
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


class UserRule(_Strict):
    groups: list[str] = Field(default_factory=list)

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return _check_groups(v)


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


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def fingerprint(token: str) -> str:
    """A short, non-reversible name for a credential (what AccessToken.token holds)."""
    return "fp:" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:16]


# ---------------------------------------------------------------------------- verification
class TokenRejected(Unauthenticated):
    """Why a bearer token was refused: expired, unknown_key, disabled, malformed, algorithm,
    bad_signature, wrong_issuer, wrong_audience, claims."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class NucleusTokenVerifier:
    """The MCP SDK TokenVerifier over the API keys and JWT settings of an AuthConfig."""

    def __init__(self, config: AuthConfig, audit: AuditLog | None = None, *,
                 now: Callable[[], float] = time.time) -> None:
        self.config = config
        self._audit = audit
        self._now = now
        self._keys = {k.sha256: k for k in config.api_keys}
        self._jwt_keys: dict[str, Any] = {}
        j = config.jwt
        if j is not None:
            if j.hs256_secret is not None:
                self._jwt_keys["HS256"] = j.hs256_secret.get_secret_value().encode("utf-8")
            pem = j.rs256_public_key or (j.rs256_public_key_file.read_text() if j.rs256_public_key_file else "")
            if pem:
                from cryptography.hazmat.primitives.serialization import load_pem_public_key

                self._jwt_keys["RS256"] = load_pem_public_key(pem.encode("utf-8"))

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return self.authenticate(token)
        except TokenRejected as err:
            log.info("bearer token refused: %s", err.reason)
            if self._audit is not None:
                self._audit.record(AuditEvent(event="auth", decision="deny", tool="bearer", reason=err.reason))
            return None

    def authenticate(self, token: str) -> AccessToken:
        """The AccessToken of a valid credential; raises TokenRejected (reason only, no secrets)."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            raise TokenRejected("malformed", "bearer token is empty or too long")
        token = token.strip()
        entry = self._keys.get(hash_key(token))
        if entry is not None:
            if entry.disabled:
                raise TokenRejected("disabled", f"API key {entry.key_id} is disabled")
            return AccessToken(
                token=fingerprint(token), client_id=entry.key_id, scopes=[], expires_at=None, subject=entry.user,
                claims={"iss": API_KEY_ISSUER, "tenant": entry.tenant, "user": entry.user,
                        "groups": list(entry.groups), "trusted_platform": entry.trusted_platform,
                        "auth_method": "api_key", "key_id": entry.key_id})
        if self.config.jwt is not None and token.count(".") == 2:
            return self._verify_jwt(token)
        raise TokenRejected("unknown_key", "bearer token is not a known API key or a valid JWT")

    def _verify_jwt(self, token: str) -> AccessToken:
        cfg = self.config.jwt
        assert cfg is not None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("malformed", "JWT header is malformed") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS or alg not in self._jwt_keys:
            raise TokenRejected("algorithm", f"JWT algorithm {alg!r} is not accepted "
                                             f"(accepted: {', '.join(sorted(self._jwt_keys))})")
        try:
            claims = jwt.decode(
                token, self._jwt_keys[alg], algorithms=[alg], issuer=cfg.issuer, audience=cfg.audience,
                leeway=cfg.leeway_s, options={"require": ["exp", "iss", "aud"], "verify_signature": True})
        except jwt.ExpiredSignatureError:
            raise TokenRejected("expired", "JWT has expired") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("wrong_audience", "JWT audience is not this server") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("wrong_issuer", "JWT issuer is not trusted") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("bad_signature", "JWT signature is invalid") from None
        except jwt.MissingRequiredClaimError as err:
            raise TokenRejected("claims", f"JWT lacks the {err.claim!r} claim") from None
        except jwt.PyJWTError as err:
            raise TokenRejected("malformed", f"JWT rejected: {type(err).__name__}") from None
        tenant = claims.get(cfg.tenant_claim)
        user = claims.get(cfg.user_claim)
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise TokenRejected("claims", f"JWT claim {cfg.tenant_claim!r} is missing or not a tenant id")
        if not isinstance(user, str) or not user or len(user) > MAX_USER_CHARS or _CONTROL.search(user):
            raise TokenRejected("claims", f"JWT claim {cfg.user_claim!r} is missing or malformed")
        raw_groups = claims.get(cfg.groups_claim, [])
        if isinstance(raw_groups, str):
            raw_groups = raw_groups.replace(",", " ").split()
        if not isinstance(raw_groups, list) or not all(isinstance(g, str) for g in raw_groups):
            raise TokenRejected("claims", f"JWT claim {cfg.groups_claim!r} must be a list of strings")
        groups = sorted({g for g in raw_groups if _GROUP.match(g)})
        aud = claims.get("aud")
        resource = aud if isinstance(aud, str) else next((a for a in aud or [] if a in cfg.audience), None)
        client_id = str(claims.get("azp") or claims.get("client_id") or f"jwt:{cfg.issuer}")
        scope = claims.get("scope", "")
        return AccessToken(
            token=fingerprint(token), client_id=client_id,
            scopes=scope.split() if isinstance(scope, str) else [], expires_at=int(claims["exp"]),
            resource=resource, subject=user,
            claims={"iss": cfg.issuer, "tenant": tenant, "user": user, "groups": groups, "trusted_platform": False,
                    "auth_method": "jwt", "key_id": str(header.get("kid") or client_id)})


# ---------------------------------------------------------------------------- principals
def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None and not hasattr(headers, "getlist"):      # plain dicts: match case-insensitively
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def parse_session_tags(value: str) -> tuple[str, ...]:
    """The `x-session-tags` header: a JSON array of strings (seed 002)."""
    try:
        tags = json.loads(value) if value.strip() else []
    except ValueError:
        raise InvalidArgument(HEADER_TAGS, "must be a JSON array of strings, e.g. [\"department:sales\"]") from None
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidArgument(HEADER_TAGS, "must be a JSON array of strings, e.g. [\"department:sales\"]")
    if len(tags) > MAX_SESSION_TAGS:
        raise InvalidArgument(HEADER_TAGS, f"has {len(tags)} tags; at most {MAX_SESSION_TAGS} accepted")
    for t in tags:
        if not t or len(t) > MAX_TAG_CHARS or _CONTROL.search(t):
            raise InvalidArgument(HEADER_TAGS, f"each tag must be 1-{MAX_TAG_CHARS} printable characters")
    return tuple(dict.fromkeys(tags))


def principal_from_access_token(token: AccessToken, headers: Mapping[str, str] | None,
                                config: AuthConfig) -> Principal:
    """The principal a verified token stands for, with platform headers applied as described above."""
    c = token.claims or {}
    tenant, user = str(c.get("tenant", "")), str(c.get("user", ""))
    if not tenant or not user:
        raise Unauthenticated("the verified token carries no tenant or user")
    groups = tuple(c.get("groups") or ())
    trusted = bool(c.get("trusted_platform"))
    base = dict(tenant_id=tenant, user_id=user, groups=groups, trusted_platform=trusted,
                auth_method=str(c.get("auth_method", "")), key_id=str(c.get("key_id", token.client_id)))
    asserted_user = _header(headers, HEADER_USER)
    asserted_tags = _header(headers, HEADER_TAGS)
    if not trusted:
        ignored = [h for h, v in ((HEADER_USER, asserted_user), (HEADER_TAGS, asserted_tags)) if v is not None]
        extra = {"ignored_headers": ",".join(ignored)} if ignored else {}
        return Principal(**base, extra=extra)
    extra: dict[str, str] = {}
    if asserted_user is not None and asserted_user.strip():
        acting = asserted_user.strip()
        if len(acting) > MAX_USER_CHARS or _CONTROL.search(acting):
            raise InvalidArgument(HEADER_USER, f"must be 1-{MAX_USER_CHARS} printable characters")
        listed = config.rules(tenant).users.get(acting)
        base["user_id"] = acting
        base["groups"] = tuple(listed.groups) if listed is not None else groups
        extra["acting_for"] = "1"
        extra["platform_user"] = user
    human = _header(headers, HEADER_HUMAN)
    if human and len(human) <= MAX_USER_CHARS and not _CONTROL.search(human):
        extra["human_uid"] = human
    tags = parse_session_tags(asserted_tags) if asserted_tags is not None else ()
    return Principal(**base, session_tags=tags, extra=extra)


class RequestIdentity:
    """Resolves the principal of the MCP request being served.

    Over HTTP with auth on, the SDK's middleware has verified the bearer token; its AccessToken
    (from the SDK's auth context) plus the request headers give the principal. Without a token
    (stdio, or HTTP with auth explicitly off) the local principal applies only if `allow_local`.
    `user_token` (seed 000's reduced-trust channel) is verified here too.
    """

    def __init__(self, config: AuthConfig | None, *, allow_local: bool,
                 verifier: NucleusTokenVerifier | None = None) -> None:
        self.config = config or EMPTY_CONFIG
        self.allow_local = allow_local
        self.verifier = verifier or (NucleusTokenVerifier(config) if config is not None else None)

    def principal(self, headers: Mapping[str, str] | None = None) -> Principal:
        token = get_access_token()
        if token is not None:
            return principal_from_access_token(token, headers, self.config)
        return current_principal(allow_local=self.allow_local)

    def principal_for_user_token(self, user_token: str, caller: Principal) -> Principal:
        """The principal of an end-user credential passed as a tool argument. Must belong to the
        caller's tenant; raises TokenRejected (reason "expired" → token_expired) otherwise."""
        if self.verifier is None:
            raise TokenRejected("unknown_key", "user_token is not accepted: this server has no auth config")
        token = self.verifier.authenticate(user_token)
        if token.expires_at is not None and token.expires_at < int(time.time()):
            raise TokenRejected("expired", "user_token has expired")
        principal = principal_from_access_token(token, None, self.config)
        if principal.tenant_id != caller.tenant_id:
            raise TokenRejected("tenant", "user_token belongs to another tenant")
        return principal


def auth_settings(config: AuthConfig, public_base_url: str, *, advertise_resource: bool) -> AuthSettings:
    """AuthSettings for MCPServer: we are a resource server; tokens are checked by our verifier
    (audience included), so the SDK's own resource check stays off."""
    issuer = config.jwt.issuer if config.jwt is not None and config.jwt.issuer.startswith(("http://", "https://")) \
        else public_base_url
    return AuthSettings(issuer_url=issuer,
                        resource_server_url=f"{public_base_url.rstrip('/')}/mcp" if advertise_resource else None,
                        validate_token_resource=False if advertise_resource else None, required_scopes=None)


# ---------------------------------------------------------------------------- key tool
def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_key(path: Path, *, tenant: str, user: str, groups: list[str], trusted_platform: bool,
            key_id: str = "") -> tuple[str, ApiKeyEntry]:
    """Make a key, append its hash to the config at `path` (created if missing). Returns (key, entry)."""
    path = Path(path)
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"version": 1}
    AuthConfig.model_validate(raw)
    key = new_key()
    entry = ApiKeyEntry(key_id=key_id or f"k-{secrets.token_hex(4)}", sha256=hash_key(key), tenant=tenant,
                        user=user, groups=groups, trusted_platform=trusted_platform,
                        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    raw = {**raw, "api_keys": [*raw.get("api_keys", []), entry.model_dump()]}
    AuthConfig.model_validate(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return key, entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.auth", description="Manage Nucleus RAG API keys")
    sub = parser.add_subparsers(dest="command", required=True)
    nk = sub.add_parser("new-key", help="make an API key, print it once, append its hash to the auth config")
    nk.add_argument("--config", type=Path, default=Path(os.environ.get("NUCLEUS_RAG_AUTH_CONFIG", "auth.json")),
                    help="auth config file (default: $NUCLEUS_RAG_AUTH_CONFIG or ./auth.json)")
    nk.add_argument("--tenant", required=True)
    nk.add_argument("--user", required=True)
    nk.add_argument("--groups", default="", help="comma-separated visibility groups")
    nk.add_argument("--key-id", default="", help="a name for the key (default: random)")
    nk.add_argument("--trusted-platform", action="store_true",
                    help="the key may assert x-user-id / x-session-tags for users of its tenant")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    try:
        key, entry = add_key(args.config, tenant=args.tenant, user=args.user, groups=groups,
                             trusted_platform=args.trusted_platform, key_id=args.key_id)
    except (ValidationError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(key)
    print(f"key_id={entry.key_id} tenant={entry.tenant} user={entry.user} groups={','.join(entry.groups) or '-'} "
          f"trusted_platform={str(entry.trusted_platform).lower()} -> {args.config} "
          "(the key is shown only now; only its SHA-256 is stored)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def grpc_principal(verifier: NucleusTokenVerifier, config: AuthConfig,
                   metadata: Mapping[str, str]) -> Principal:
    """The principal of a gRPC call from its `authorization: Bearer ...` metadata (same keys,
    JWT rules and trusted-platform headers as MCP over HTTP). Raises Unauthenticated."""
    header = _header(metadata, "authorization") or ""
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise Unauthenticated("missing bearer token: send 'authorization: Bearer <key>' metadata")
    token = verifier.authenticate(credential.strip())
    if token.expires_at is not None and token.expires_at < int(time.time()):
        raise TokenRejected("expired", "bearer token has expired")
    return principal_from_access_token(token, metadata, config)
