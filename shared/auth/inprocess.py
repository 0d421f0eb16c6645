"""Zero trust for calls between services that share one process (`nucleus up --mode single`).

Across processes a call carries a signed token and the callee's auth interceptor turns it into
the verified caller (`shared.auth.service_identity.ServiceVerifier`). In one process nothing is
signed or parsed, but the callee must see the very same `Principal` and apply the very same
policy, so `InProcessCaller.principal()` makes the principal the verifier would have made:

    authentication off                     None: served as sent (as a call without a token is
                                           served when the stack runs without identities)
    no calling service named               Unauthenticated (a call without a caller is refused)
    a caller that may not call the callee  PermissionDenied (`service_identity.CALLERS`)
    work done for an end user              the on-behalf-of principal: the user's tenant,
                                           groups, session tags and roles (never the operator
                                           role), auth_method "on_behalf_of"
    otherwise                              the calling service itself ("service:<name>"),
                                           marked `for_operator` when the work is for the
                                           verified operator (as the signed token's claim)

`serving_as(principal)` then runs the callee's code with that principal as
`shared.identity.verified_caller()` (and as the user its own outgoing calls act for), exactly as
the auth interceptor runs a gRPC handler. `in_process_call` is the whole call, as the in-process
clients make it: the RPC's span, the caller's principal, the deadline.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from shared.auth.service_identity import CALLERS
from shared.errors import DeadlineExceeded, PermissionDenied, Unauthenticated
from shared.identity import FOR_OPERATOR, OPERATOR, Principal, acting_for, is_verified_operator, on_behalf_of, serving


@dataclass(frozen=True, slots=True)
class InProcessCaller:
    """Who calls `callee` in process: the calling service (`service`), and whether the stack
    requires authentication (`require_auth`: it has identities, as the gRPC servers would)."""

    service: str | None
    callee: str
    require_auth: bool

    def principal(self) -> Principal | None:
        """The verified caller the callee sees for a call made now (module docstring)."""
        if not self.require_auth:
            return None
        if not self.service:
            raise Unauthenticated(f"an in-process call to {self.callee} needs a verified caller")
        if self.service not in CALLERS.get(self.callee, frozenset()):
            raise PermissionDenied(f"{self.service} may not call {self.callee}")
        user = on_behalf_of()
        if user is not None and user.tenant_id and user.auth_method not in ("service", OPERATOR):
            return Principal(tenant_id=user.tenant_id, user_id=user.user_id, groups=user.groups,
                             session_tags=user.session_tags, roles=tuple(r for r in user.roles if r != OPERATOR),
                             auth_method="on_behalf_of", key_id=f"in-process:{self.service}",
                             extra={"service": self.service})
        extra = {"service": self.service}
        if is_verified_operator(user):
            extra[FOR_OPERATOR] = "1"           # as the signed token's claim: no role, a marker
        return Principal(tenant_id="", user_id=f"service:{self.service}", auth_method="service",
                         key_id=f"in-process:{self.service}", extra=extra)


@contextmanager
def serving_as(principal: Principal | None) -> Iterator[None]:
    """Run the callee's code with `principal` as its verified caller (None: authentication off)."""
    with serving(principal), acting_for(principal):
        yield


@asynccontextmanager
async def in_process_call(caller: InProcessCaller, *, service: str, rpc_service: str, callee: str, method: str,
                          timeout_s: float, tracer_provider: Any = None) -> AsyncIterator[Principal | None]:
    """One in-process call of `rpc_service`/`method`: the span the RPC would make, the principal
    the callee's auth would verify (refused here as it would refuse), served as that principal,
    cut at `timeout_s` as DeadlineExceeded naming `service`."""
    from shared.telemetry.inprocess import rpc_span

    with rpc_span(rpc_service, method, callee=callee, tracer_provider=tracer_provider):
        principal = caller.principal()
        with serving_as(principal):
            try:
                async with asyncio.timeout(timeout_s):
                    yield principal
            except TimeoutError:
                raise DeadlineExceeded(f"{service} did not answer before the deadline") from None


__all__ = ["InProcessCaller", "in_process_call", "serving_as"]
