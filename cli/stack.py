"""What every `nucleus` subcommand shares: the consoles, the data directory, the running stack's
state (<data dir>/run/stack.json), and how to reach and sign calls to its services.

    console / err_console   rich consoles for results and for errors
    data_dir                --data-dir, else $NUCLEUS_DATA_DIR / .nucleus-data
    stack_state             the stack.json `nucleus up` wrote (Unavailable when no stack runs)
    credentials             the operator's signing interceptors for a service (auth on), else None
    tls_ca                  the CA of a stack started with NUCLEUS_TLS=1, else None
    target                  a service's gRPC address: --<service>-target, else stack.json
    call_pipeline           one RAGPipeline call as $NUCLEUS_API_KEY's user, else as the operator
    USAGE_EXIT, INTERRUPTED_EXIT   exit codes of every subcommand besides its errors' (shared.errors)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from cli.identity import identity_dir
from shared.auth.service_auth import operator_interceptors
from shared.errors import Unavailable
from shared.settings import cli_settings

ROOT = Path(__file__).resolve().parent.parent
DEMO_CORPUS = ROOT / "demo" / "corpus"
console = Console(width=None if sys.stdout.isatty() else 132)
err_console = Console(stderr=True)
#: Exit codes of every subcommand besides its errors' `exit_code` (shared.errors): bad arguments
#: (argparse's own), and Ctrl-C (cli/main.py).
USAGE_EXIT, INTERRUPTED_EXIT = 2, 130


def data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).resolve() if args.data_dir else cli_settings(args).data_dir


def stack_state(args: argparse.Namespace) -> dict:
    state_file = data_dir(args) / "run" / "stack.json"
    if not state_file.exists():
        raise Unavailable(f"no running stack found ({state_file} missing); start it with `nucleus up`")
    return json.loads(state_file.read_text())


def credentials(args: argparse.Namespace, callee: str) -> list | None:
    """Sign calls to `callee` with the operator key when the stack requires authentication
    (the key pair `nucleus up` made in <data dir>/identity, or $NUCLEUS_IDENTITY_DIR)."""
    return operator_interceptors(identity_dir(args), callee)


def tls_ca(args: argparse.Namespace) -> Path | None:
    """The CA of a stack started with NUCLEUS_TLS=1 (recorded in stack.json), else None."""
    try:
        ca = stack_state(args).get("tls_ca_file", "")
    except Unavailable:
        return None
    return Path(ca) if ca else None


def target(args: argparse.Namespace, service: str) -> str:
    explicit = getattr(args, f"{service}_target", None)
    if explicit:
        return explicit
    return stack_state(args)["services"][service]["grpc"]


async def call_pipeline(args: argparse.Namespace, method: str, request):
    """One RAGPipeline unary call: as the user of $NUCLEUS_API_KEY when set, else signed as the operator."""
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from shared.grpc_client import aio_channel, call
    key = cli_settings(args).api_key.get_secret_value()
    signing = None if key else credentials(args, "rag_pipeline")
    async with aio_channel(target(args, "rag_pipeline"), signing, tls_ca_file=tls_ca(args)) as channel:
        stub = rag_grpc.RagPipelineStub(channel)
        return await call(getattr(stub, method), request, timeout=30.0, service="RAGPipeline",
                          metadata=(("authorization", f"Bearer {key}"),) if key else None)


def put_get_list_parser(sub: argparse._SubParsersAction, command: str, key: str, help: str) -> argparse.ArgumentParser:
    """`nucleus COMMAND put|get|list [KEY] --tenant T [--rag-pipeline-target ADDR]`, the records a
    command keeps through `call_pipeline` (`nucleus persona`, `nucleus profile`); the command adds
    its own options."""
    p = sub.add_parser(command, help=help)
    p.add_argument("action", choices=["put", "get", "list"])
    p.add_argument(key, nargs="?", default="")
    p.add_argument("--tenant", default="", help="the tenant (an API key's own tenant when $NUCLEUS_API_KEY)")
    p.add_argument("--rag-pipeline-target", dest="rag_pipeline_target")
    return p
