"""Command-line flags every service process shares, applied over its settings object."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeVar

from shared.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)


def parse_args(prog: str, description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout instead of gRPC + HTTP")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--grpc-port", type=int, help="gRPC port (0 = ephemeral)")
    parser.add_argument("--mcp-port", type=int, help="MCP streamable HTTP port (0 = ephemeral, -1 = off)")
    parser.add_argument("--ready-file", type=Path, help="write bound addresses here as JSON when serving")
    return parser.parse_args()


def apply_overrides(settings: S, args: argparse.Namespace) -> S:
    update = {k: v for k, v in {"host": args.host, "grpc_port": args.grpc_port, "mcp_port": args.mcp_port}.items()
              if v is not None}
    return settings.model_copy(update=update) if update else settings
