"""Run one service process: its gRPC server (plus grpc.health.v1 and reflection) and its MCP
server (streamable HTTP at /mcp) in one asyncio loop over one core, or MCP over stdio.

With `tls_cert_file` + `tls_key_file` in the settings, gRPC is served over TLS and /mcp over
HTTPS (shared/tls.py); otherwise plaintext, for the 127.0.0.1 development stack.

Graceful shutdown on SIGTERM/SIGINT: health goes NOT_SERVING first, then the MCP HTTP server
stops accepting, then gRPC drains in-flight calls for `shutdown_grace_s`, then the core closes.

When `ready_file` is given, the bound addresses are written there as JSON once both servers
listen (ports of 0 pick free ephemeral ports, so this is how supervisors and tests find them).

Health: `<grpc service name>` is SERVING while the process serves. A service that can serve
with some part impaired (the KnowledgeStore with a corrupted tenant, say) reports that part
as its own health entry, `<grpc service name>.<component>` (`ServiceSpec.watch_health`), so
a probe can see "degraded" without the whole service being taken for down.
"""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from shared import keepalive
from shared.grpc_client import MAX_MESSAGE_BYTES
from shared.http_guard import guard_http_app
from shared.settings import ServiceSettings
from shared.tls import server_credentials
from shared.telemetry.providers import setup_telemetry, shutdown_telemetry  # telemetry hook
from shared.telemetry.server_interceptor import ServerTracingInterceptor  # telemetry hook

log = logging.getLogger(__name__)

# Every service's gRPC server, in split and single mode: message limits as the channels', and the
# keepalive policy that permits what our channels send (shared/keepalive.py).
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    *keepalive.server_options(),
]


@dataclass
class ServiceSpec:
    """What a service contributes to the process; built by each service's `main`."""

    name: str                                   # e.g. "knowledge_store"
    grpc_service_name: str                      # e.g. "nucleus.v1.KnowledgeStore"
    add_servicers: Callable[[grpc.aio.Server], None]
    mcp_server: Any | None = None               # mcp.server.mcpserver.MCPServer
    close: Callable[[], Awaitable[None]] | None = None
    http_middleware: list[Any] = field(default_factory=list)  # extra ASGI middleware (auth)
    allowed_hosts: list[str] = field(default_factory=list)    # extra Host values for /mcp
    grpc_interceptors: list[Any] = field(default_factory=list)
    on_mcp_bound: Callable[[str], None] | None = None         # called with the /mcp URL once bound
    # Called once serving with `report(component, serving)`, which the service calls (from any
    # thread) whenever a component turns impaired or well again (module docstring).
    watch_health: Callable[[Callable[[str, bool], None]], None] | None = None
    # Called once with the service's `shared.telemetry.prometheus.ServiceMetrics`: registers the
    # collectors of what no span carries (open tenants, breaker state, sources...), read per scrape.
    metrics: Callable[[Any], None] | None = None
    # Extra Starlette routes / mounts on the HTTP port beside /mcp and /metrics (the RAGPipeline's
    # /console); the Host/Origin guard and the HTTP metrics cover them like every other route.
    http_routes: list[Any] = field(default_factory=list)
    # Started once serving, cancelled at shutdown: low-priority upkeep (the KnowledgeStore's
    # title-vector backfill, services/knowledge_store/title_vectors.py).
    background: Callable[[], Awaitable[Any]] | None = None


def _transport_security(host: str, extra_hosts: list[str]) -> Any:
    """Host/Origin validation (DNS-rebinding protection), on whatever address we bind."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = {"127.0.0.1:*", "localhost:*", "[::1]:*", f"{host}:*", *extra_hosts}
    origins = {f"http://{h.replace(':*', '')}:*" for h in hosts} | {f"https://{h.replace(':*', '')}:*" for h in hosts}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=sorted(hosts), allowed_origins=sorted(origins)
    )


def mcp_http_app(spec: ServiceSpec, settings: ServiceSettings) -> Any:
    """The ASGI app served over HTTP: the MCP server's app (plus the spec's middleware) behind
    the Host/Origin guard that covers every route, not only /mcp (shared/http_guard.py)."""
    from starlette.routing import Route

    from shared.auth.scrape import ScrapeAuth
    from shared.telemetry.prometheus import HttpMetricsMiddleware, metrics_endpoint

    security = _transport_security(settings.host, spec.allowed_hosts)
    app = spec.mcp_server.streamable_http_app(host=settings.host, transport_security=security)
    for mw in spec.http_middleware:
        app.add_middleware(mw[0], **mw[1])
    # GET /metrics: this service's Prometheus series; operators only when authentication is on
    authorize = ScrapeAuth(settings.identity_dir, spec.name).allows if settings.identity_dir is not None else None
    app.router.routes.append(Route("/metrics", metrics_endpoint(spec.name, authorize), methods=["GET"]))
    app.router.routes.extend(spec.http_routes)
    app.add_middleware(HttpMetricsMiddleware, service=spec.name)
    return guard_http_app(app, security)


async def _start_metrics(spec: ServiceSpec, mode: str) -> None:
    """The service's Prometheus registry: build info, the served tool names (the only `method`
    values an MCP tool call may take) and the spec's scrape-time collectors."""
    from shared.telemetry.prometheus import service_metrics
    from shared.telemetry.resource import service_version

    metrics = service_metrics(spec.name)
    metrics.build_info.labels(spec.name, service_version(), mode).set(1)
    if spec.mcp_server is not None:
        try:
            metrics.tools.allow(tool.name for tool in await spec.mcp_server.list_tools())
        except Exception as err:  # noqa: BLE001 - metrics never stop a service from starting
            log.warning("%s: tool names for metrics unavailable (%s)", spec.name, type(err).__name__)
    if spec.metrics is not None:
        spec.metrics(metrics)


def _bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


#: The cyclic collector's first-generation threshold once serving (CPython's default: 700). A query
#: allocates thousands of short-lived containers that reference counting frees anyway; collecting
#: every 700 of them (and the second generation after) cost the event loop ~0.12 ms a query.
GC_FIRST_GENERATION = 20_000


def settle_heap() -> None:
    """Called once a process serves: what start-up built (the model, the indexes, the servers) is
    moved out of the cyclic collector's sight (`gc.freeze`), so that a full collection scans only
    what serving made since — over the loaded model one took ~280 ms of the event loop, about
    every 960 queries with telemetry on (0.29 ms a query) — and the first generation is collected
    every GC_FIRST_GENERATION allocations. Frozen objects live as long as the process, which is
    what start-up builds anyway (tenants open on first use, later). SciFact, single mode, 16
    searches at once: `python -m lab.query_path_costs --part gc` (lab/NOTES.md 2026-12-08)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_FIRST_GENERATION, 10, 10)


def write_ready(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` to `path` atomically (the ready-file format of the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


async def run_service(spec: ServiceSpec, settings: ServiceSettings, *, ready_file: Path | None = None,
                      stop: asyncio.Event | None = None, own_process: bool = True,
                      on_ready: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Serve gRPC (+ MCP over HTTP unless settings.mcp_port < 0) until SIGTERM/SIGINT, or until
    `stop` is set. `own_process=False` (several services in one process, services/single_process):
    the caller installs telemetry and signal handlers and says when to stop; `on_ready` gets
    the addresses the ready file would hold."""
    if own_process:
        setup_telemetry(spec.name)  # telemetry hook: the OTel SDK, once per process
    server = grpc.aio.server(
        interceptors=[ServerTracingInterceptor(), *spec.grpc_interceptors],  # telemetry hook: SERVER spans
        options=SERVER_OPTIONS,
    )
    spec.add_servicers(server)
    await _start_metrics(spec, "split" if own_process else "single")
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (spec.grpc_service_name, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    tls = settings.tls_cert_file is not None and settings.tls_key_file is not None
    address = f"{settings.host}:{settings.grpc_port}"
    grpc_port = (server.add_secure_port(address, server_credentials(settings.tls_cert_file, settings.tls_key_file))
                 if tls else server.add_insecure_port(address))
    if grpc_port == 0:
        raise SystemExit(f"{spec.name}: cannot bind gRPC on {settings.host}:{settings.grpc_port}")
    await server.start()

    uvicorn_server = None
    http_task: asyncio.Task[None] | None = None
    mcp_url = ""
    if spec.mcp_server is not None and settings.mcp_port >= 0:
        import uvicorn

        app = mcp_http_app(spec, settings)
        sock = _bind_socket(settings.host, settings.mcp_port)
        mcp_port = sock.getsockname()[1]
        ssl = {"ssl_certfile": str(settings.tls_cert_file), "ssl_keyfile": str(settings.tls_key_file)} if tls else {}
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, **ssl)
        uvicorn_server = uvicorn.Server(config)
        uvicorn_server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        http_task = asyncio.create_task(uvicorn_server.serve(sockets=[sock]))
        while not uvicorn_server.started and not http_task.done():
            await asyncio.sleep(0.01)
        if http_task.done():
            http_task.result()
        mcp_url = f"{'https' if tls else 'http'}://{settings.host}:{mcp_port}/mcp"
        if spec.on_mcp_bound is not None:
            spec.on_mcp_bound(mcp_url)

    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(spec.grpc_service_name, health_pb2.HealthCheckResponse.SERVING)
    if spec.watch_health is not None:
        spec.watch_health(_component_reporter(health_servicer, spec.grpc_service_name))
    addresses = {"service": spec.name, "grpc": f"{settings.host}:{grpc_port}", "mcp": mcp_url, "pid": os.getpid(),
                 "tls": tls}
    log.info("%s serving gRPC on %s%s", spec.name, addresses["grpc"], f", MCP on {mcp_url}" if mcp_url else "")
    if own_process:
        settle_heap()
    if ready_file is not None:
        write_ready(ready_file, addresses)
    if on_ready is not None:
        on_ready(addresses)

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    background = asyncio.create_task(spec.background()) if spec.background is not None else None
    waiters = [asyncio.create_task(stop.wait())] + ([http_task] if http_task else [])
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    if background is not None:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)

    log.info("%s shutting down: health NOT_SERVING, draining for %.1fs", spec.name, settings.shutdown_grace_s)
    await health_servicer.enter_graceful_shutdown()
    if uvicorn_server is not None:
        uvicorn_server.should_exit = True
    await server.stop(settings.shutdown_grace_s)
    if http_task is not None:
        try:
            await asyncio.wait_for(http_task, timeout=settings.shutdown_grace_s)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - shutting down regardless
            http_task.cancel()
    if spec.close is not None:
        await spec.close()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)
    if own_process:
        shutdown_telemetry()  # telemetry hook: export buffered spans (bounded) before exit
    log.info("%s stopped", spec.name)


def _component_reporter(servicer: Any, service_name: str) -> Callable[[str, bool], None]:
    """`report(component, serving)` setting `<service_name>.<component>`, callable from any thread."""
    loop = asyncio.get_running_loop()

    def report(component: str, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        loop.call_soon_threadsafe(lambda: loop.create_task(servicer.set(f"{service_name}.{component}", status)))

    return report


async def run_stdio(spec: ServiceSpec) -> None:
    """Serve the MCP server over stdin/stdout (no gRPC port)."""
    if spec.mcp_server is None:
        raise SystemExit(f"{spec.name} has no MCP server")
    setup_telemetry(spec.name)  # telemetry hook: the OTel SDK, once per process
    try:
        await spec.mcp_server.run_stdio_async()
    finally:
        if spec.close is not None:
            await spec.close()
        shutdown_telemetry()  # telemetry hook


async def serve(build: Callable[[], ServiceSpec], settings: ServiceSettings, *, stdio: bool,
                ready_file: Path | None = None) -> None:
    """Build the spec inside the running loop (gRPC aio channels belong to the loop that
    creates them), then serve it over stdio or gRPC + HTTP."""
    spec = build()
    await (run_stdio(spec) if stdio else run_service(spec, settings, ready_file=ready_file))
