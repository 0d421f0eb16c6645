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
from dataclasses import dataclass, field

from shared.errors import Unauthenticated

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


def local_principal() -> Principal:
    groups = tuple(g for g in os.environ.get("NUCLEUS_LOCAL_GROUPS", "").split(",") if g)
    return Principal(tenant_id=os.environ.get("NUCLEUS_LOCAL_TENANT", "demo"),
                     user_id=os.environ.get("NUCLEUS_LOCAL_USER", os.environ.get("USER", "local")),
                     groups=groups, auth_method="local")


def current_principal(*, allow_local: bool) -> Principal:
    """The principal of a request that carries no verified token: the local principal if
    `allow_local`, else Unauthenticated. `allow_local` is true only for transports where the
    caller is the local user who launched the process (stdio, or HTTP with auth explicitly
    disabled for development)."""
    if allow_local:
        return local_principal()
    raise Unauthenticated("no verified identity for this request")
