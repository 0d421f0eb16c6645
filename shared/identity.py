"""Who is calling: the verified principal decides tenant, user and groups.

Tools never take tenant or user from their arguments. Over HTTP with auth on, the principal
comes from the bearer token verified by the MCP SDK's auth middleware:
`shared.auth.principals.RequestIdentity` turns the SDK's AccessToken (plus the x-user-id /
x-session-tags headers of a trusted platform key) into a `Principal`. Over stdio, or HTTP
with auth explicitly off, the process was launched by a local user, so the principal is the
one configured for the process (`NUCLEUS_LOCAL_TENANT`, `NUCLEUS_LOCAL_USER`,
`NUCLEUS_LOCAL_GROUPS`): `current_principal` with `allow_local=True`.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from shared.errors import Unauthenticated
from shared.settings import StackSettings

#: What a tenant id may be, everywhere (credentials, JWT claims, store requests, directory names):
#: 1-64 characters, letters, digits, '_', '.', '-', starting with a letter or digit.
TENANT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TENANT_ID_RULE = "1-64 characters, letters, digits, '_', '.', '-', starting with a letter or digit"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: str
    user_id: str
    groups: tuple[str, ...] = ()
    trusted_platform: bool = False      # may assert x-user-id / x-session-tags on behalf of users
    session_tags: tuple[str, ...] = ()
    auth_method: str = "local"          # "api_key" | "jwt" | "local"
    key_id: str = ""                    # which credential (never the secret itself)
    extra: dict[str, str] = field(default_factory=dict)
    roles: tuple[str, ...] = ()         # e.g. ("admin",): tenant-wide changes (see ADMIN)

    def has_role(self, role: str) -> bool:
        return role in self.roles


#: The role for tenant-wide changes (default ranking profile, ingest/delete, source settings).
ADMIN = "admin"
#: The stack's operator (the `nucleus` CLI's own key): its principal name, role and auth method.
OPERATOR = "operator"
#: A service's call made for a verified operator (the RAGPipeline serving the operator's console
#: session) says so: the service token's claim and the callee's `Principal.extra` key. It grants no
#: role: the callee still sees the calling service, and only a policy that names it honours it
#: (the KnowledgeStore's storage condition, `front.store_status`).
FOR_OPERATOR = "for_operator"


def is_verified_operator(principal: Principal | None) -> bool:
    """The operator's own token verified it (only the operator's key gives the operator role)."""
    return principal is not None and principal.auth_method == OPERATOR and principal.has_role(OPERATOR)


def relays_operator(principal: Principal | None) -> bool:
    """A calling service that verified the operator and works for it (never a user's assertion)."""
    return principal is not None and principal.auth_method == "service" and principal.extra.get(FOR_OPERATOR) == "1"


def local_principal(tenant_id: str = "") -> Principal:
    """NUCLEUS_LOCAL_TENANT / _USER / _GROUPS (`StackSettings`): the owner of a local stack.
    `tenant_id` names its tenant instead where the local caller said which (the CLI's `--tenant`,
    as `nucleus ingest` acts on the tenant it names); MCP's local caller keeps NUCLEUS_LOCAL_TENANT."""
    stack = StackSettings()
    return Principal(tenant_id=tenant_id or stack.local_tenant,
                     user_id=stack.local_user or os.environ.get("USER", "local"),
                     groups=tuple(g for g in stack.local_groups.split(",") if g), auth_method="local", roles=(ADMIN,))


#: gRPC metadata of a caller without a verified identity (authentication off) asking to be
#: answered as the local principal, as MCP answers every such caller (`nucleus search` sends it),
#: of the tenant the request names (`--tenant`), else of NUCLEUS_LOCAL_TENANT.
LOCAL_PRINCIPAL_METADATA = ("x-nucleus-principal", "local")
#: Response metadata naming the principal a request was answered as (`describe_principal`).
ANSWERED_AS_METADATA = "x-nucleus-answered-as"


def describe_principal(principal: Principal | None) -> str:
    """Who a request was answered as, for an operator to read (no credential material)."""
    if principal is None:
        return "the operator (authentication off; no visibility filter: every document of the tenant)"
    if principal.has_role(OPERATOR):
        return "the operator" + (f" (tenant {principal.tenant_id})" if principal.tenant_id else "")
    kind = "local principal" if principal.auth_method == "local" else "user"
    groups = ", ".join(principal.groups) or "none"
    return f"{kind} {principal.user_id} of tenant {principal.tenant_id} (groups: {groups})"


def current_principal(*, allow_local: bool) -> Principal:
    """The principal of a request that carries no verified token: the local principal if
    `allow_local`, else Unauthenticated. `allow_local` is true only for transports where the
    caller is the local user who launched the process (stdio, or HTTP with auth explicitly
    disabled for development)."""
    if allow_local:
        return local_principal()
    raise Unauthenticated("no verified identity for this request")


# ---------------------------------------------------------------------------- request context
_CALLER: ContextVar[Principal | None] = ContextVar("nucleus_caller", default=None)
_UNSET = Principal(tenant_id="", user_id="")          # "not said": fall back to the verified caller
_ON_BEHALF_OF: ContextVar[Principal | None] = ContextVar("nucleus_on_behalf_of", default=_UNSET)


def verified_caller() -> Principal | None:
    """The principal the transport verified for the request being served (None: auth off)."""
    return _CALLER.get()


@contextmanager
def serving(principal: Principal | None) -> Iterator[None]:
    """Mark `principal` as the verified caller of the request being served (set by the gRPC
    auth interceptor around each handler)."""
    token = _CALLER.set(principal)
    try:
        yield
    finally:
        _CALLER.reset(token)


def on_behalf_of() -> Principal | None:
    """The end user the current work is done for: outgoing calls carry a signed assertion of it.
    Defaults to the verified caller of the request being served."""
    value = _ON_BEHALF_OF.get()
    return _CALLER.get() if value is _UNSET else value


def queue_key(principal: Principal | None) -> str:
    """Whose turn a request is in a fair queue: the end user it is for (tenant/user), else the
    calling service or operator, else "" (authentication off: one shared turn)."""
    if principal is None:
        return ""
    if principal.tenant_id:
        return f"{principal.tenant_id}/{principal.user_id}"
    return principal.user_id


def act_for(principal: Principal) -> None:
    """`acting_for` for the rest of the current task (an MCP tool call resolves its caller
    inside the tool; each request runs in a task of its own, so nothing leaks across calls)."""
    _ON_BEHALF_OF.set(principal)


@contextmanager
def acting_for(principal: Principal | None) -> Iterator[None]:
    """Outgoing calls inside this block act for `principal` (tasks started inside inherit it);
    None = as the service itself, for no user."""
    token = _ON_BEHALF_OF.set(principal)
    try:
        yield
    finally:
        _ON_BEHALF_OF.reset(token)
