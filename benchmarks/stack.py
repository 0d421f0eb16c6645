"""The services a benchmark talks to: a stack the harness starts itself, or a running one.

Own stack: `cli.supervisor.Supervisor` on ephemeral ports with its data under
`<stack_dir>` (default `.bench-cache/stack-data/`), so the KnowledgeStore — and with it the
ingested tenants — persists between runs. If a healthy stack already serves that directory
(another harness left it running), it is used rather than started twice on the same data.

Running stack (`--use-running`): the addresses in `<data_dir>/run/stack.json`, as written by
`nucleus up`. `nucleus bench`, `nucleus attack`, `python -m benchmarks.soak`, `benchmarks.federate`,
`benchmarks.big_file` and `benchmarks.archive_speed` take it with `add_running_arguments` (under
`nucleus`, `--data-dir` is the `nucleus` option) and open it with `running_stack` (`open_stack`).
`nucleus attack` needs a stack its own secure start began, whose credentials it made
(benchmarks/secure_stack.py `running_secure_stack`).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import Unavailable

log = logging.getLogger(__name__)


@dataclass
class Stack:
    data_dir: Path
    services: dict[str, dict]
    started_here: bool
    query_cache: str = "unknown"       # LlmOrchestration's query-embedding cache: "on", "off", "unknown"
    _supervisor: object | None = field(default=None, repr=False)

    def grpc(self, service: str) -> str:
        return self.services[service]["grpc"]

    def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.stop()
            self._supervisor = None


def add_running_arguments(p, *, data_dir: bool = True) -> None:
    """`--use-running`, and `--data-dir` unless the command is a `nucleus` one (`data_dir=False`: there
    `--data-dir` is the `nucleus` option, which `running_data_dir` reads all the same)."""
    p.add_argument("--use-running", action="store_true",
                   help="use the stack in <data-dir>/run/stack.json (`nucleus up`) instead of starting one")
    if data_dir:
        p.add_argument("--data-dir", type=Path, help="with --use-running: the stack's data directory "
                                                     "(default NUCLEUS_DATA_DIR, else .nucleus-data)")


def running_data_dir(args) -> Path:
    """The data directory `--use-running` names: `args.data_dir`, else the stack's default."""
    from shared.settings import default_data_dir

    data_dir = getattr(args, "data_dir", None)
    return Path(data_dir).resolve() if data_dir else default_data_dir().resolve()


def open_stack(args, stack_dir: Path, **own) -> Stack:
    """The running stack when `args.use_running`, else `own_stack(stack_dir, **own)`."""
    if getattr(args, "use_running", False):
        return running_stack(running_data_dir(args))
    return own_stack(stack_dir, **own)


def running_stack(data_dir: Path) -> Stack:
    from cli.supervisor import GRPC_NAMES
    from shared.healthcheck import health_ok

    state_file = data_dir / "run" / "stack.json"
    if not state_file.is_file():
        raise Unavailable(f"no running stack found ({state_file} missing); start one with `nucleus up`, "
                          "or leave out --use-running to let the benchmark start its own")
    try:
        state = json.loads(state_file.read_text())
        services = state["services"]
        unhealthy = [n for n, s in services.items() if not health_ok(s["grpc"], GRPC_NAMES.get(n, ""))]
    except (ValueError, KeyError, TypeError) as err:
        raise Unavailable(f"{state_file} is not a stack state file ({err})") from None
    if unhealthy:
        raise Unavailable(f"the stack in {data_dir} is not healthy ({', '.join(unhealthy)} not serving)")
    missing = {"knowledge_store", "rag_pipeline"} - set(services)
    if missing:
        raise Unavailable(f"{state_file} lists no {', '.join(sorted(missing))}")
    return Stack(data_dir=data_dir, services=services, started_here=False)


def own_stack(stack_dir: Path, *, query_cache: bool = False, timeout_s: float = 240.0,
              extra_env: dict[str, str] | None = None) -> Stack:
    """Start (or find running) the benchmark stack. Without `query_cache` LlmOrchestration keeps
    no query-embedding cache, so repeated benchmark queries pay for their embedding each time."""
    from cli.supervisor import Supervisor

    stack_dir = stack_dir.resolve()
    if (stack_dir / "run" / "stack.json").is_file():
        try:
            stack = running_stack(stack_dir)
            log.info("a healthy stack already serves %s; using it (query cache setting unknown)", stack_dir)
            return stack
        except Unavailable:
            (stack_dir / "run" / "stack.json").unlink(missing_ok=True)
    env = {
        "NUCLEUS_DATA_DIR": str(stack_dir),
        "NUCLEUS_KS_DATA_DIR": str(stack_dir / "knowledge_store"),
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        "TRANSFORMERS_OFFLINE": os.environ.get("TRANSFORMERS_OFFLINE", "1"),
    }
    if not query_cache:
        env["NUCLEUS_LLM_CACHE_SIZE"] = "0"
    env.update(extra_env or {})
    supervisor = Supervisor(stack_dir, ephemeral_ports=True, extra_env=env)
    try:
        services = supervisor.start(timeout_s=timeout_s)
    except (RuntimeError, TimeoutError) as err:
        raise Unavailable(f"the benchmark stack did not start: {err}") from None
    return Stack(data_dir=stack_dir, services=services, started_here=True, query_cache="on" if query_cache else "off",
                 _supervisor=supervisor)
