"""Calls between services that share one process (`nucleus up --mode single`): zero trust, and
the same trace as across processes.

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
clients make it: the RPC's span, the caller's principal, the deadline; `InProcessClient` makes it
for every call of a core's call table, generically.

Telemetry of these calls:

    rpc_span(service, method)    the INTERNAL span of one in-process call, named and attributed
                                 as the gRPC call's spans are (`shared.telemetry.rpc`:
                                 `{rpc.service}/{rpc.method}`, rpc.system, rpc.service,
                                 rpc.method, rpc.grpc.status_code, error.type), plus
                                 `nucleus.transport = "in-process"`; an error is recorded as the
                                 status code the gRPC adapter would have answered
    in_service(name)             the spans started inside belong to service `name`
    setup_routed_telemetry(...)  one SDK per service (its resource, its trace file, its metrics),
                                 behind one global TracerProvider that hands each span to the
                                 provider of the service whose code runs (`in_service`), so a
                                 trace reads the same as across processes: the same span names,
                                 the same service per span, one connected tree

Which service runs is a context variable: each service's servers are started inside
`in_service(its name)` (tasks inherit it), and an in-process call switches it to the callee for
the duration of the call. `opentelemetry-api` only, except `setup_routed_telemetry`, which the
composition root calls once.
"""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import aclosing, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.auth.service_identity import CALLERS
from shared.errors import DeadlineExceeded, NucleusError, PermissionDenied, Unauthenticated
from shared.grpc_errors import grpc_status
from shared.identity import FOR_OPERATOR, OPERATOR, Principal, acting_for, is_verified_operator, on_behalf_of, serving
from shared.telemetry.rpc import SERVER_ERROR_CODES, TRACER_NAME, exception_code

#: The service whose code runs in this context ("" = not said: the process's first service).
CURRENT_SERVICE: ContextVar[str] = ContextVar("nucleus_current_service", default="")
TRANSPORT_ATTRIBUTE = "nucleus.transport"

_tracer = trace.get_tracer(TRACER_NAME)


@contextmanager
def in_service(name: str) -> Iterator[None]:
    token = CURRENT_SERVICE.set(name)
    try:
        yield
    finally:
        CURRENT_SERVICE.reset(token)


def error_code(err: BaseException) -> grpc.StatusCode:
    """The status code a gRPC adapter would have answered `err` with."""
    if isinstance(err, NucleusError):
        return grpc_status(err)
    return exception_code(err)


class rpc_span:
    """An INTERNAL span for one in-process call of `service`/`method` ("nucleus.v1.KnowledgeStore",
    "GetEntries"), run as service `callee` when given (module docstring). `tracer_provider`:
    the global one unless given (tests). A plain context manager (no generator, no nested
    `start_as_current_span` layers): it runs around every in-process call of every query."""

    __slots__ = ("_name", "_attributes", "_callee", "_tracer", "_service_token", "_context_token", "span")

    def __init__(self, service: str, method: str, *, callee: str = "",
                 tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = _tracer if tracer_provider is None else trace.get_tracer(TRACER_NAME,
                                                                               tracer_provider=tracer_provider)
        self._name, self._callee = f"{service}/{method}", callee
        self._attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method,
                            TRANSPORT_ATTRIBUTE: "in-process"}

    def __enter__(self) -> trace.Span:
        self._service_token = CURRENT_SERVICE.set(self._callee) if self._callee else None
        self.span = self._tracer.start_span(self._name, kind=SpanKind.INTERNAL, attributes=self._attributes)
        self._context_token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: object) -> None:
        span = self.span
        try:
            code = grpc.StatusCode.OK if err is None else error_code(err)
            if err is not None and not isinstance(err, NucleusError):
                span.set_attribute("exception.type", type(err).__qualname__)
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_attribute("error.type", code.name)
                if code in SERVER_ERROR_CODES:
                    span.set_status(Status(StatusCode.ERROR, code.name))
        finally:
            otel_context.detach(self._context_token)
            span.end()
            if self._service_token is not None:
                CURRENT_SERVICE.reset(self._service_token)


class _RoutedTracer(trace.Tracer):
    """A tracer that starts each span with the tracer of the service whose code runs."""

    def __init__(self, tracers: Mapping[str, trace.Tracer], default: str) -> None:
        self._tracers = dict(tracers)
        self._default = self._tracers[default]

    def _pick(self) -> trace.Tracer:
        return self._tracers.get(CURRENT_SERVICE.get(), self._default)

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._pick().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any):   # the picked tracer's own context manager
        return self._pick().start_as_current_span(*args, **kwargs)


class RoutedTracerProvider(trace.TracerProvider):
    """The process's TracerProvider over one provider per service (module docstring)."""

    def __init__(self, providers: Mapping[str, trace.TracerProvider], default: str) -> None:
        self._providers = dict(providers)
        self._default = default

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _RoutedTracer({name: p.get_tracer(instrumenting_module_name, *args, **kwargs)
                              for name, p in self._providers.items()}, self._default)


def setup_routed_telemetry(services: tuple[str, ...], default: str) -> list[Any]:
    """Install one SDK per service behind a RoutedTracerProvider; the meter provider of
    `default` is the process's global one. Returns the `Telemetry` objects (flush / shut down
    each at exit); [] when OTEL_SDK_DISABLED=true."""
    import os

    from opentelemetry import metrics

    from shared.telemetry.providers import build_telemetry

    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}:
        return []
    from shared.telemetry.prometheus import service_metrics

    service_metrics(default)        # made first: `default`'s /metrics carries the process series, once
    installed = {name: build_telemetry(name) for name in services}
    trace.set_tracer_provider(RoutedTracerProvider({n: t.tracer_provider for n, t in installed.items()}, default))
    metrics.set_meter_provider(installed[default].meter_provider)
    return list(installed.values())



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
                          timeout_s: float | None, tracer_provider: Any = None) -> AsyncIterator[Principal | None]:
    """One in-process call of `rpc_service`/`method`: the span the RPC would make, the principal
    the callee's auth would verify (refused here as it would refuse), served as that principal,
    cut at `timeout_s` (None: never) as DeadlineExceeded naming `service`."""
    with rpc_span(rpc_service, method, callee=callee, tracer_provider=tracer_provider):
        principal = caller.principal()
        with serving_as(principal):
            try:
                async with asyncio.timeout(timeout_s):
                    yield principal
            except TimeoutError:
                raise DeadlineExceeded(f"{service} did not answer before the deadline") from None



@dataclass(frozen=True, slots=True)
class Call:
    """One row of a service's call table (its front's `CALLS`: call name -> Call)."""
    rpc: str                  # the RPC's method name in the service's RPC service
    idempotent: bool          # a retry after an attempt that took effect changes nothing
    long: bool = False        # long work: the client's long deadline, not the call deadline


def idempotent_methods(rpc_service: str, calls: Mapping[str, Call], *, more: tuple[str, ...] = ()) -> frozenset[str]:
    """The full gRPC method names ("/<rpc_service>/<Method>") of the idempotent calls of a call
    table, and of `more` RPCs: what a client's channel may resend after UNAVAILABLE."""
    return frozenset(f"/{rpc_service}/{name}" for name in {c.rpc for c in calls.values() if c.idempotent} | set(more))


class InProcessClient:
    """A service's port over its core in this process, from the core's call table: for each call
    named in `calls` (name -> a `Call`: `rpc`, the RPC's method name, and `long`, long work),
    one generic wrapper made on first use, the `in_process_call` around the target's method of
    that name: the span named as the RPC, the caller the callee's auth would verify (passed to
    the method first), the deadline (`timeout_s=` of the call, else `timeout_s`, for long work
    `long_timeout_s`). A method that is an async generator (a streamed call) holds its caller
    and span for its whole iteration, never only while the call is opened, and its deadline bounds
    the wait for each item (as the gRPC client's streamed ingest does): a stream that progresses
    runs as long as its work, one that goes quiet for the deadline is cut."""

    def __init__(self, target: Any, calls: Mapping[str, Any], caller: InProcessCaller, *, service: str,
                 rpc_service: str, timeout_s: float, long_timeout_s: float, tracer_provider: Any = None) -> None:
        self._target, self._calls, self._caller = target, calls, caller
        self._service, self._rpc_service = service, rpc_service
        self._tracer_provider = tracer_provider         # None: the process's (tests pass their own)
        self.timeout_s, self.long_timeout_s = timeout_s, long_timeout_s

    async def close(self) -> None:
        """The core belongs to its service, which closes it."""

    def __getattr__(self, name: str) -> Any:
        call = self._calls.get(name) if not name.startswith("_") else None
        if call is None:
            raise AttributeError(f"the {self._service} has no call '{name}'")
        method = getattr(self._target, name)
        default_s = self.long_timeout_s if call.long else self.timeout_s

        def opened(timeout_s: float | None):
            return in_process_call(self._caller, service=self._service, rpc_service=self._rpc_service,
                                   callee=self._caller.callee, method=call.rpc, timeout_s=timeout_s,
                                   tracer_provider=self._tracer_provider)

        if inspect.isasyncgenfunction(method):
            async def streamed(*args: Any, timeout_s: float | None = None, **kwargs: Any):
                wait_s = timeout_s or default_s
                async with opened(None) as principal:
                    async with aclosing(method(principal, *args, **kwargs)) as items:
                        while True:     # the deadline runs while the callee works, not while the caller does
                            try:
                                async with asyncio.timeout(wait_s):
                                    item = await anext(items)
                            except StopAsyncIteration:
                                return
                            except TimeoutError:
                                raise DeadlineExceeded(f"{self._service} sent nothing of the stream for "
                                                       f"{wait_s:g} s") from None
                            yield item
            wrapper = streamed
        else:
            async def unary(*args: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
                async with opened(timeout_s or default_s) as principal:
                    return await method(principal, *args, **kwargs)
            wrapper = unary
        wrapper.__name__ = name
        setattr(self, name, wrapper)        # made once per client and call
        return wrapper

__all__ = ["CURRENT_SERVICE", "Call", "InProcessCaller", "InProcessClient", "RoutedTracerProvider", "error_code",
           "idempotent_methods", "in_process_call", "in_service", "rpc_span", "serving_as", "setup_routed_telemetry"]
