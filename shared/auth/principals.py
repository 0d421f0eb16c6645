"""Who a verified credential stands for: AccessToken (+ platform headers) -> Principal.

    RequestIdentity                the principal of the MCP request being served (and of a
                                   `user_token` tool argument)
    principal_from_access_token()  a verified token plus the request headers -> Principal
    grpc_principal()               the principal of a gRPC call from its bearer metadata

The SDK's bearer middleware calls `verify_token` and answers HTTP 401 before any tool runs
when it returns None. Tools then turn the verified AccessToken into a `Principal`:

- an ordinary credential: tenant, user, groups and roles from the key entry or the JWT claims;
  `x-user-id` / `x-session-tags` headers are IGNORED (and the audit record says so);
- a key marked `trusted_platform` (a chat platform acting for its users, seed 002): the user
  is `x-user-id` (always within the key's tenant), the groups are that user's entry under
  `tenants.<tenant>.users` in the config, else the key's own groups; its roles only those of
  that entry (a platform key's own roles never pass to the users it acts for); the session tags
  are the JSON array in `x-session-tags` (a malformed header is refused, never ignored);
- a key marked as a peer Nucleus stack's (`peer_stack`): with an `x-nucleus-assertion` header
  the principal is the asserted user of that stack, `<user>@<stack>`, in the key's tenant, with
  the asserted groups the key's `peer_groups` list and no role (shared/auth/peer.py); an
  assertion that does not verify is refused.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from shared.auth.config import CONTROL_CHARS, EMPTY_CONFIG, MAX_USER_CHARS, AuthConfig
from shared.auth.peer import HEADER_ASSERTION, verify_assertion
from shared.auth.service_identity import bearer
from shared.auth.verifier import NucleusTokenVerifier, TokenRejected
from shared.errors import InvalidArgument, Unauthenticated
from shared.identity import Principal, current_principal

MAX_SESSION_TAGS = 64
MAX_TAG_CHARS = 256
HEADER_USER = "x-user-id"
HEADER_TAGS = "x-session-tags"
HEADER_HUMAN = "x-human-uid"


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
        if not t or len(t) > MAX_TAG_CHARS or CONTROL_CHARS.search(t):
            raise InvalidArgument(HEADER_TAGS, f"each tag must be 1-{MAX_TAG_CHARS} printable characters")
    return tuple(dict.fromkeys(tags))


def _peer_principal(c: Mapping, assertion: str, config: AuthConfig, stack_id: str) -> Principal | None:
    """The asserted user of a peer stack's key (None: the key is no peer's)."""
    key_id = str(c.get("key_id", ""))
    entry = (next((k for k in config.api_keys if k.key_id == key_id), None)
             if c.get("auth_method") == "api_key" else None)
    if entry is None or not entry.peer_stack:
        return None
    claims = verify_assertion(assertion, public_pem=entry.peer_public_key, issuer=entry.peer_stack, audience=stack_id)
    allowed = set(entry.peer_groups)
    groups = tuple(sorted({g for g in claims.get("groups", []) if g in allowed}))
    return Principal(tenant_id=entry.tenant, user_id=f"{claims['sub']}@{entry.peer_stack}"[:MAX_USER_CHARS],
                     groups=groups, auth_method="peer_assertion", key_id=key_id,
                     extra={"acting_for": "1", "peer_stack": entry.peer_stack})


def principal_from_access_token(token: AccessToken, headers: Mapping[str, str] | None,
                                config: AuthConfig, stack_id: str = "") -> Principal:
    """The principal a verified token stands for, with platform headers applied as described above."""
    c = token.claims or {}
    assertion = _header(headers, HEADER_ASSERTION)
    if assertion is not None:
        peer = _peer_principal(c, assertion, config, stack_id)
        if peer is not None:
            return peer
        # an assertion on a key that is no peer's is ignored, like platform headers of an ordinary key
    tenant, user = str(c.get("tenant", "")), str(c.get("user", ""))
    if not tenant or not user:
        raise Unauthenticated("the verified token carries no tenant or user")
    groups = tuple(c.get("groups") or ())
    trusted = bool(c.get("trusted_platform"))
    base = dict(tenant_id=tenant, user_id=user, groups=groups, trusted_platform=trusted,
                auth_method=str(c.get("auth_method", "")), key_id=str(c.get("key_id", token.client_id)),
                roles=tuple(c.get("roles") or ()))
    asserted_user = _header(headers, HEADER_USER)
    asserted_tags = _header(headers, HEADER_TAGS)
    if not trusted:
        ignored = [h for h, v in ((HEADER_USER, asserted_user), (HEADER_TAGS, asserted_tags)) if v is not None]
        extra = {"ignored_headers": ",".join(ignored)} if ignored else {}
        return Principal(**base, extra=extra)
    extra: dict[str, str] = {}
    if asserted_user is not None and asserted_user.strip():
        acting = asserted_user.strip()
        if len(acting) > MAX_USER_CHARS or CONTROL_CHARS.search(acting):
            raise InvalidArgument(HEADER_USER, f"must be 1-{MAX_USER_CHARS} printable characters")
        listed = config.rules(tenant).users.get(acting)
        base["user_id"] = acting
        base["groups"] = tuple(listed.groups) if listed is not None else groups
        base["roles"] = tuple(listed.roles) if listed is not None else ()    # never the platform key's
        extra["acting_for"] = "1"
        extra["platform_user"] = user
    human = _header(headers, HEADER_HUMAN)
    if human and len(human) <= MAX_USER_CHARS and not CONTROL_CHARS.search(human):
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
                 verifier: NucleusTokenVerifier | None = None, stack_id: str = "") -> None:
        self.config = config or EMPTY_CONFIG
        self.allow_local = allow_local
        self.verifier = verifier or (NucleusTokenVerifier(config) if config is not None else None)
        self.stack_id = stack_id          # the audience a peer stack's assertion must name

    def principal(self, headers: Mapping[str, str] | None = None) -> Principal:
        token = get_access_token()
        if token is not None:
            return principal_from_access_token(token, headers, self.config, self.stack_id)
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


def grpc_principal(verifier: NucleusTokenVerifier, config: AuthConfig,
                   metadata: Mapping[str, str]) -> Principal:
    """The principal of a gRPC call from its `authorization: Bearer ...` metadata (same keys,
    JWT rules and trusted-platform headers as MCP over HTTP). Raises Unauthenticated."""
    token = verifier.authenticate(bearer({"authorization": _header(metadata, "authorization") or ""}))
    if token.expires_at is not None and token.expires_at < int(time.time()):
        raise TokenRejected("expired", "bearer token has expired")
    return principal_from_access_token(token, metadata, config)


__all__ = [
    "HEADER_USER", "HEADER_TAGS", "HEADER_HUMAN", "MAX_SESSION_TAGS", "MAX_TAG_CHARS", "parse_session_tags",
    "principal_from_access_token", "RequestIdentity", "grpc_principal",
]
