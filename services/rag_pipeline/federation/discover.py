"""`rag_discover_resources` across the federation: the local store's resources and every
allowed remote's, each tagged with its server and a connection status.

    connected         the remote answered; its resources are listed (a seed-002 server, which
                      has no discovery, is listed as one resource: the whole server)
    action_required   the source needs a credential that is not available, or the remote
                      refused it (HTTP 401): an operator must act
    locked            the remote answered that this caller may not use it (HTTP 403)
    error             anything else (connection, timeout, protocol); the message says which

A remote resource's id is `<server>:<resource id>`; passing it (or the bare server id) in
`rag_get_raw_results`'s `sources` searches that remote (fanout.py). Remote calls run in
parallel, each under min(the source's `timeout_s`, the budget).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from services.rag_pipeline.federation.fanout import Federation, RemoteRefused
from services.rag_pipeline.federation.hits import Caller
from services.rag_pipeline.federation.sources import Source
from shared.identity import Principal

CONNECTED, ACTION_REQUIRED, LOCKED, ERROR = "connected", "action_required", "locked", "error"
DISCOVER_BUDGET_S = 5.0


@dataclass(frozen=True, slots=True)
class RemoteResources:
    source: Source
    status: str
    resources: list[dict[str, Any]] = field(default_factory=list)   # as the remote described them
    error: str = ""


def status_of(err: BaseException) -> tuple[str, str]:
    """(connection status, message) of a failed remote call."""
    kind = getattr(err, "kind", "")
    message = getattr(err, "message", "") or f"{type(err).__name__}: {err}"
    if kind == "credential":
        return (LOCKED if "403" in message or "forbidden" in message.lower() else ACTION_REQUIRED), message
    if isinstance(err, TimeoutError):
        return ERROR, "no answer before the deadline"
    return ERROR, message


async def discover_remotes(federation: Federation, principal: Principal | None, caller: Caller | None, *,
                           budget_s: float = DISCOVER_BUDGET_S) -> list[RemoteResources]:
    """Each remote `rag` source `principal` may use, with its resources (as the remote
    describes them to `caller`) and status."""
    plan = federation.plan([], principal, caller.tenant_id if caller is not None else None)
    search = federation.search

    async def one(source: Source) -> RemoteResources:
        if source.needs_credential and source.credential() is None:
            return RemoteResources(source, ACTION_REQUIRED, error="the source's credential is not available")
        deadline = max(0.001, min(source.timeout_s, budget_s))
        try:
            async with asyncio.timeout(deadline):
                resources = await search.discover(source, caller, deadline)
        except RemoteRefused as err:      # the remote answered that this caller may not use it
            return RemoteResources(source, LOCKED, error=f"{err.code}: {err.message}")
        except Exception as err:          # one remote failing only marks its own entry
            status, message = status_of(err)
            return RemoteResources(source, status, error=message)
        return RemoteResources(source, CONNECTED, resources)

    return list(await asyncio.gather(*(one(s) for s in plan.remotes)))
