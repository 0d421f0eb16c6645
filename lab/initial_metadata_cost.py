"""What SearchAndRank's separate initial-metadata send (`x-nucleus-answered-as`) costs the server.

    .venv/bin/python -m lab.initial_metadata_cost

A grpc.aio server in its own process answers grpc.health.v1 Check, once plainly and once
sending one initial-metadata entry first (`context.send_initial_metadata`, as
services/rag_pipeline/grpc_api.py does); 16 client channels in this process, 300 calls each,
3 repetitions. Prints the server process's CPU ms a call (median) for each, alternating twice.
Figures only (lab/NOTES.md 2026-12-08).
"""
from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

CLIENTS, CALLS = 16, 300


def _serve(ports: multiprocessing.Queue, explicit: bool) -> None:
    class Health(health_pb2_grpc.HealthServicer):
        async def Check(self, request, context):
            if explicit:
                await context.send_initial_metadata((("x-nucleus-answered-as", "local"),))
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def main() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ports.put((port, os.getpid()))
        await server.wait_for_termination()

    asyncio.run(main())


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _per_call_ms(port: int, pid: int) -> float:
    stubs = [health_pb2_grpc.HealthStub(grpc.aio.insecure_channel(f"127.0.0.1:{port}")) for _ in range(CLIENTS)]

    async def client(stub, n: int) -> None:
        for _ in range(n):
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)

    await asyncio.gather(*(client(s, 50) for s in stubs))          # warm-up
    runs = []
    for _ in range(3):
        before = _cpu_s(pid)
        await asyncio.gather(*(client(s, CALLS) for s in stubs))
        runs.append((_cpu_s(pid) - before) * 1000 / (CLIENTS * CALLS))
    return statistics.median(runs)


def main() -> None:
    for explicit in (False, True, False, True):
        ports: multiprocessing.Queue = multiprocessing.Queue()
        server = multiprocessing.Process(target=_serve, args=(ports, explicit))
        server.start()
        try:
            port, pid = ports.get(timeout=30)
            ms = asyncio.run(_per_call_ms(port, pid))
            print(f"{'initial metadata sent first' if explicit else 'plain':<28} {ms:.3f} ms server CPU a call")
        finally:
            server.terminate()
            server.join()


if __name__ == "__main__":
    main()
