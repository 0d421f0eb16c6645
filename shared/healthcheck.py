"""gRPC health probe (grpc.health.v1): used by the supervisor, the CLI and container health checks.

    python -m shared.healthcheck --target 127.0.0.1:50061 --service nucleus.v1.KnowledgeStore

exits 0 only if the service reports SERVING.
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def health_ok(target: str, service: str = "", timeout: float = 1.0) -> bool:
    """True when `service` at `target` answers SERVING within `timeout` seconds."""
    try:
        with grpc.insecure_channel(target) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout)
            return response.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.healthcheck")
    parser.add_argument("--target", required=True)
    parser.add_argument("--service", default="")
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    return 0 if health_ok(args.target, args.service, args.timeout) else 1


if __name__ == "__main__":
    sys.exit(main())
