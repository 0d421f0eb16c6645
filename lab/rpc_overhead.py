"""What one traced, authenticated gRPC call costs in CPU, apart from the work it carries.

    .venv/bin/python -m lab.rpc_overhead [--clients 16] [--calls 200]

An echo method (`nucleus.v1.Bench/Echo`, 100-byte payload) served and called in one process
over 127.0.0.1, `--clients` concurrent callers each under a span of their own (as a traced
request makes its calls), in four set-ups, each in a fresh interpreter (the OpenTelemetry SDK
is installed once per process):

    bare      no interceptors, no SDK
    auth      the signing client interceptor and the verifying server interceptor
              (shared.auth: Ed25519 service tokens of a fresh identity directory)
    tracing   the SDK as a service installs it (trace file, stage metrics) and the tracing
              client / server interceptors
    both      tracing and auth, as the services run

It prints CPU ms per call (client and server sides together, export threads included), then
the per-span costs inside tracing (span start/end, propagation, what the processors' threads
do per span) and the token caches' hit costs. Figures only: nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("bare", "auth", "tracing", "both")


async def _calls(mode: str, clients: int, calls: int, tmp: Path) -> dict[str, float]:
    import grpc
    from opentelemetry import trace

    server_interceptors: list = []
    client_interceptors: list = []
    if mode in ("tracing", "both"):
        from shared.telemetry.providers import setup_telemetry
        from shared.telemetry.server_interceptor import ServerTracingInterceptor
        from shared.settings import TelemetrySettings

        setup_telemetry("knowledge_store", TelemetrySettings(trace_dir=tmp / "traces"))
        server_interceptors.append(ServerTracingInterceptor())
    if mode in ("auth", "both"):
        from shared.auth.service_auth import ServiceAuth
        from shared.auth.service_identity import ensure_identities

        identity = ensure_identities(tmp / "identity")
        callee = ServiceAuth.load("knowledge_store", identity)
        caller = ServiceAuth.load("rag_pipeline", identity)
        assert callee is not None and caller is not None
        server_interceptors.append(callee.server_interceptor())
        client_interceptors += caller.client_interceptors("knowledge_store")

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    def same(b: bytes) -> bytes:
        return b

    server = grpc.aio.server(interceptors=server_interceptors or None)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("nucleus.v1.Bench", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo, request_deserializer=same, response_serializer=same)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    target = f"127.0.0.1:{port}"
    if mode in ("tracing", "both"):
        from shared.grpc_client import aio_channel

        channel = aio_channel(target, client_interceptors)
    else:
        channel = grpc.aio.insecure_channel(target, interceptors=client_interceptors or None)
    stub = channel.unary_unary("/nucleus.v1.Bench/Echo", request_serializer=same, response_deserializer=same)
    tracer = trace.get_tracer("lab.rpc_overhead")
    payload = b"x" * 100

    async def client(n: int) -> None:
        for _ in range(n):
            with tracer.start_as_current_span("request"):
                await stub(payload)

    await asyncio.gather(*(client(20) for _ in range(clients)))          # warm-up
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client(calls) for _ in range(clients)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await channel.close()
    await server.stop(None)
    n = clients * calls
    return {"cpu_ms": 1000 * cpu / n, "wall_ms": 1000 * wall / n}


def _per_span_costs(tmp: Path) -> list[tuple[str, float]]:
    """Microseconds of CPU per operation, in a tight loop."""
    from opentelemetry.propagate import extract, inject
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
    from opentelemetry.trace import SpanKind

    from shared.auth.service_identity import ServiceSigner, ServiceVerifier, ensure_identities
    from shared.telemetry.file_exporters import span_to_record
    from shared.telemetry.providers import build_telemetry
    from shared.telemetry.rpc import RPC_METER_NAME
    from shared.telemetry.server_interceptor import _GETTER
    from shared.settings import TelemetrySettings
    from shared.telemetry.span_redaction import Redactor
    from shared.telemetry.stage_metrics import StageMetrics

    telemetry = build_telemetry("knowledge_store", TelemetrySettings(trace_dir=tmp / "traces-2"))
    tracer = telemetry.tracer_provider.get_tracer("nucleus.grpc")
    ended: list[ReadableSpan] = []

    class Keep(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            if not ended:
                ended.append(span)

    telemetry.tracer_provider.add_span_processor(Keep())

    def client_span() -> None:
        attributes = {"rpc.system": "grpc", "rpc.service": "nucleus.v1.KnowledgeStore",
                      "rpc.method": "SearchPersonaKnowledgeByVector", "server.address": "127.0.0.1",
                      "server.port": 50061}
        with tracer.start_as_current_span("nucleus.v1.KnowledgeStore/SearchPersonaKnowledgeByVector",
                                          kind=SpanKind.CLIENT, attributes=attributes, record_exception=False,
                                          set_status_on_exception=False) as span:
            span.set_attribute("rpc.grpc.status_code", 0)

    def timed(fn, n: int = 5_000) -> float:
        fn()
        started = time.process_time()
        for _ in range(n):
            fn()
        return 1e6 * (time.process_time() - started) / n

    rows = [("gRPC CLIENT span, started and ended, processors' threads included", timed(client_span))]
    telemetry.tracer_provider.force_flush()
    span = ended[0]
    carrier: dict[str, str] = {}
    with tracer.start_as_current_span("parent"):
        inject(carrier)
        rows.append(("inject traceparent", timed(lambda: inject({}))))
    metadata = tuple(carrier.items())
    rows.append(("extract traceparent", timed(lambda: extract(metadata, getter=_GETTER))))
    redactor = Redactor()
    rows.append(("processor thread: redaction of one span", timed(lambda: redactor.sanitize(span))))
    rows.append(("processor thread: trace-file line of one span",
                 timed(lambda: json.dumps(span_to_record(span), separators=(",", ":")))))
    stage = StageMetrics(telemetry.meter_provider.get_meter("nucleus.stages"),
                         rpc_meter=telemetry.meter_provider.get_meter(RPC_METER_NAME))
    rows.append(("processor thread: stage + rpc metrics of one gRPC span", timed(lambda: stage.record(span))))
    identity = ensure_identities(tmp / "identity-2")
    signer = ServiceSigner.load(identity, "rag_pipeline")
    verifier = ServiceVerifier(identity, "knowledge_store")
    token = signer.token("knowledge_store")
    verifier.verify(token)
    rows.append(("service token, signer cache hit", timed(lambda: signer.token("knowledge_store"))))
    rows.append(("service token, verifier cache hit", timed(lambda: verifier.verify(token))))
    telemetry.shutdown()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200, help="calls per client (default 200)")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)    # one set-up, in a child
    parser.add_argument("--per-span", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode:
            print(json.dumps(asyncio.run(_calls(args.mode, args.clients, args.calls, Path(tmp)))))
            return
        if args.per_span:
            print(json.dumps(_per_span_costs(Path(tmp))))
            return
    print(f"{args.clients} clients x {args.calls} calls, one process, CPU per call (both sides):")
    for mode in MODES:
        out = subprocess.run([sys.executable, "-m", "lab.rpc_overhead", "--mode", mode, "--clients",
                              str(args.clients), "--calls", str(args.calls)], capture_output=True, text=True,
                             check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"  {mode:8s} {r['cpu_ms']:.3f} ms CPU, {r['wall_ms']:.3f} ms wall per call")
    out = subprocess.run([sys.executable, "-m", "lab.rpc_overhead", "--per-span"], capture_output=True,
                         text=True, check=True).stdout
    print("per operation (µs of CPU):")
    for name, us in json.loads(out.strip().splitlines()[-1]):
        print(f"  {us:7.1f}  {name}")


if __name__ == "__main__":
    main()
