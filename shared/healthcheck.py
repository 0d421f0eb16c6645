"""gRPC health probe (grpc.health.v1): used by the supervisor, the CLI and container health checks.

    python -m shared.healthcheck --target 127.0.0.1:50061 --service nucleus.v1.KnowledgeStore

exits 0 only if the service reports SERVING.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def health_ok(target: str, service: str = "", timeout: float = 1.0, *, ca_file: str | Path | None = None,
              server_name: str = "") -> bool:
    """True when `service` at `target` answers SERVING within `timeout` seconds (over TLS
    verified against `ca_file` when given; `server_name` = the name in the certificate when
    the target's host is not, e.g. a probe inside the pod)."""
    try:
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials(Path(ca_file).read_bytes()), options)
                   if ca_file else grpc.insecure_channel(target))
        with channel:
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
    parser.add_argument("--ca-file", default=None, help="CA certificate: check over TLS")
    parser.add_argument("--server-name", default="", help="the name in the server's certificate")
    args = parser.parse_args()
    return 0 if health_ok(args.target, args.service, args.timeout, ca_file=args.ca_file,
                          server_name=args.server_name) else 1


if __name__ == "__main__":
    sys.exit(main())
