"""Bearer token verification: a static API key or a JWT becomes a verified AccessToken.

    NucleusTokenVerifier   the MCP SDK's TokenVerifier (bearer token -> AccessToken | None),
                           also used for gRPC metadata and the `user_token` tool argument
    TokenRejected          why a token was refused (a reason, never the token)

JWTs are verified with PyJWT: signature (HS256 shared secret and/or RS256 public key, nothing
else — `alg: none` and every other algorithm are refused before any decoding), issuer,
expiry (`exp` required), audience, and the tenant / user / groups / roles claims. AccessToken.token
holds a fingerprint, not the token; failures are logged and audited by reason only.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

import jwt

from shared.audit import AuditEvent, AuditLog
from shared.auth.api_keys import fingerprint, hash_key
from shared.auth.config import CONTROL_CHARS, GROUP_NAME, MAX_USER_CHARS, ROLES, AuthConfig
from shared.identity import TENANT_ID
from shared.errors import Unauthenticated
from shared.telemetry.prometheus import count_refusal

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken

log = logging.getLogger(__name__)

API_KEY_ISSUER = "nucleus-api-key"       # the `iss` of AccessTokens made from API keys
ALGORITHMS = ("HS256", "RS256")          # the only JWT algorithms ever accepted
MAX_TOKEN_CHARS = 16_384


class TokenRejected(Unauthenticated):
    """Why a bearer token was refused: expired, unknown_key, disabled, malformed, algorithm,
    bad_signature, wrong_issuer, wrong_audience, claims."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class NucleusTokenVerifier:
    """The MCP SDK TokenVerifier over the API keys and JWT settings of an AuthConfig."""

    def __init__(self, config: AuthConfig, audit: AuditLog | None = None, *,
                 now: Callable[[], float] = time.time, service: str = "rag_pipeline") -> None:
        self.config = config
        self.service = service                  # whose nucleus_auth_refusals_total counts its refusals
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
        """The AccessToken of a valid credential; raises TokenRejected (reason only, no secrets),
        counted in nucleus_auth_refusals_total{reason} of `service`."""
        try:
            return self._authenticate(token)
        except TokenRejected as err:
            count_refusal(self.service, err.reason)
            raise

    def _authenticate(self, token: str) -> AccessToken:
        from mcp.server.auth.provider import AccessToken   # here: the CLI imports this module, never the MCP SDK

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
                        "groups": list(entry.groups), "roles": list(entry.roles),
                        "trusted_platform": entry.trusted_platform, "auth_method": "api_key",
                        "key_id": entry.key_id})
        if self.config.jwt is not None and token.count(".") == 2:
            return self._verify_jwt(token)
        raise TokenRejected("unknown_key", "bearer token is not a known API key or a valid JWT")

    def _verify_jwt(self, token: str) -> AccessToken:
        from mcp.server.auth.provider import AccessToken

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
        if not isinstance(tenant, str) or not TENANT_ID.match(tenant):
            raise TokenRejected("claims", f"JWT claim {cfg.tenant_claim!r} is missing or not a tenant id")
        if not isinstance(user, str) or not user or len(user) > MAX_USER_CHARS or CONTROL_CHARS.search(user):
            raise TokenRejected("claims", f"JWT claim {cfg.user_claim!r} is missing or malformed")
        groups = sorted({g for g in _names(claims, cfg.groups_claim) if GROUP_NAME.match(g)})
        roles = sorted({r for r in _names(claims, cfg.roles_claim) if r in ROLES})   # others' roles are not ours
        aud = claims.get("aud")
        resource = aud if isinstance(aud, str) else next((a for a in aud or [] if a in cfg.audience), None)
        client_id = str(claims.get("azp") or claims.get("client_id") or f"jwt:{cfg.issuer}")
        scope = claims.get("scope", "")
        return AccessToken(
            token=fingerprint(token), client_id=client_id,
            scopes=scope.split() if isinstance(scope, str) else [], expires_at=int(claims["exp"]),
            resource=resource, subject=user,
            claims={"iss": cfg.issuer, "tenant": tenant, "user": user, "groups": groups, "roles": roles,
                    "trusted_platform": False, "auth_method": "jwt", "key_id": str(header.get("kid") or client_id)})


def _names(claims: dict[str, Any], claim: str) -> list[str]:
    """A list-of-strings claim; a string is split on commas and whitespace (absent = [])."""
    raw = claims.get(claim, [])
    if isinstance(raw, str):
        raw = raw.replace(",", " ").split()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise TokenRejected("claims", f"JWT claim {claim!r} must be a list of strings")
    return raw


__all__ = ["API_KEY_ISSUER", "ALGORITHMS", "MAX_TOKEN_CHARS", "TokenRejected", "NucleusTokenVerifier"]
