"""What a remote source receives of the caller, per request (never fixed on a pooled session).

    send = outgoing(source, caller, tenants, path=query.path, stack_id="stack-a")
    remote.call_tool(name, {"username": send.username, ...}, headers=send.headers, meta=send.meta)

By the source's `identity` (sources.py):
  * `username` (default): seed 000's `username` argument, the verified user's id — qualified
    as `user@tenant` when the source serves several tenants, so alice of t1 and alice of t2
    are never one user at the remote;
  * `headers`: also seed 002's platform headers `x-user-id` (the same qualified id) and
    `x-session-tags` (a JSON array of the caller's session tags) — only to sources the operator
    marked `trusted` (the sources file refuses it otherwise);
  * `assertion` (a remote Nucleus): the `username` as above, and an `x-nucleus-assertion` header,
    a JWT signed with this stack's key (assertion.py) for the audience the source names: the
    user and the caller's groups; the remote maps this stack to one tenant and keeps only the
    groups it allows (shared/auth/peer.py); roles never travel;
  * `none`: nothing of the caller (an empty `username`): a corpus that is the same for everyone.
Never the caller's own token: the pooled session carries the source's credential only.

Every outgoing call also carries the federation path in `_meta` (FEDERATION_META): the stacks
the query already went through, this one last. A stack that finds itself on the path of an
incoming query answers from its own store only and says so (`federation loop ...` note), and a
path longer than MAX_HOPS is not extended, so two stacks federating each other both answer.
"""
from __future__ import annotations

import json
import re
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from services.rag_pipeline.federation.hits import Caller
from services.rag_pipeline.federation.sources import Source

FEDERATION_META = "io.nucleus/federation"
MAX_HOPS = 4
STACK_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_TAGS = 64

#: The federation path of the request being served (set by the MCP adapter from the incoming
#: call's `_meta`); the fan-out extends it, or refuses to go further when this stack is on it.
INCOMING_PATH: ContextVar[tuple[str, ...]] = ContextVar("nucleus_federation_path", default=())


@dataclass(frozen=True, slots=True)
class Outgoing:
    username: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def outgoing(source: Source, caller: Caller | None, tenants: frozenset[str] = frozenset(), *,
             path: tuple[str, ...] = (), stack_id: str = "", signer: Any = None) -> Outgoing:
    """The user id, headers and `_meta` a call to `source` carries for `caller` (`signer`: this
    stack's assertion key, for `identity: assertion`)."""
    user = ""
    headers: dict[str, str] = {}
    if caller is not None and source.identity != "none":
        user = source.user_for(caller.tenant_id, caller.user_id, tenants)
        if source.identity == "headers" and source.trusted:
            headers["x-user-id"] = user
            headers["x-session-tags"] = json.dumps(list(caller.session_tags[:MAX_TAGS]))
        if source.identity == "assertion" and signer is not None and user:
            headers["x-nucleus-assertion"] = signer.sign(audience=source.audience, user=user,
                                                         groups=caller.groups, tenant=caller.tenant_id)
    meta: dict[str, Any] = {}
    if stack_id:
        meta[FEDERATION_META] = {"path": [*path, stack_id][-MAX_HOPS - 1:]}
    return Outgoing(user, headers, meta)


def path_from_meta(meta: Any) -> tuple[str, ...]:
    """The federation path of an incoming call's `_meta` (ill-formed entries are dropped)."""
    if meta is None:
        return ()
    if not isinstance(meta, dict):
        meta = getattr(meta, "model_extra", None) or getattr(meta, "__dict__", {}) or {}
    value = meta.get(FEDERATION_META) if isinstance(meta, dict) else None
    raw = value.get("path") if isinstance(value, dict) else None
    if not isinstance(raw, list):
        return ()
    return tuple(p for p in raw[: MAX_HOPS + 1] if isinstance(p, str) and STACK_ID.match(p))


def loop_reason(path: tuple[str, ...], stack_id: str) -> str:
    """Why this stack must not federate a query that came along `path` ("" = it may)."""
    if stack_id and stack_id in path:
        return f"federation loop: this stack ({stack_id}) is already on the query's path " \
               f"({' > '.join(path)}); answered from its own store only"
    if len(path) >= MAX_HOPS:
        return f"federation loop guard: the query already went through {len(path)} stacks " \
               f"(at most {MAX_HOPS}); answered from this stack's own store only"
    return ""
