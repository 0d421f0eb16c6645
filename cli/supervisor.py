"""Local supervisor used by `nucleus up`: starts the three services in dependency order
(LlmOrchestration -> KnowledgeStore -> RAGPipeline), waits until each is healthy over
grpc.health.v1, records their addresses in `<data_dir>/run/stack.json`, restarts a service
that dies (bounded back-off), and stops them all gracefully on SIGTERM/SIGINT.

    python -m cli.supervisor --data-dir .nucleus-data [--ephemeral-ports]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from shared.healthcheck import health_ok
from shared.settings import default_data_dir

log = logging.getLogger("nucleus.supervisor")

SERVICES = ("llm_orchestration", "knowledge_store", "rag_pipeline")
MODULES = {
    "llm_orchestration": "services.llm_orchestration.main",
    "knowledge_store": "services.knowledge_store.main",
    "rag_pipeline": "services.rag_pipeline.main",
}
DEFAULT_PORTS = {"llm_orchestration": (50062, 8062), "knowledge_store": (50061, 8061), "rag_pipeline": (50063, 8063)}
GRPC_NAMES = {"llm_orchestration": "nucleus.v1.LlmOrchestration", "knowledge_store": "nucleus.v1.KnowledgeStore",
              "rag_pipeline": "nucleus.v1.RagPipeline"}


@dataclass
class Child:
    name: str
    env: dict[str, str]
    ready_file: Path
    log_file: Path
    proc: subprocess.Popen | None = None
    address: dict = field(default_factory=dict)
    restarts: int = 0

    def start(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        out = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", MODULES[self.name], "--ready-file", str(self.ready_file)],
            env=self.env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        out.close()

    def wait_ready(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}; see {self.log_file}")
            if self.ready_file.exists():
                address = json.loads(self.ready_file.read_text())
                if health_ok(address["grpc"], GRPC_NAMES[self.name]):
                    self.address = address
                    return address
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not healthy after {timeout_s:.0f}s; see {self.log_file}")

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Supervisor:
    def __init__(self, data_dir: Path, *, ephemeral_ports: bool = False, host: str = "127.0.0.1",
                 extra_env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir.resolve()
        self.run_dir = self.data_dir / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = self.run_dir / "stack.json"
        self.host = host
        self.ephemeral = ephemeral_ports
        self.extra_env = extra_env or {}
        self.children: dict[str, Child] = {}

    def _env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.setdefault("NUCLEUS_DATA_DIR", str(self.data_dir))
        grpc_port, mcp_port = (0, 0) if self.ephemeral else DEFAULT_PORTS[name]
        prefix = _prefix(name)
        env.setdefault(prefix + "HOST", self.host)
        env.setdefault(prefix + "GRPC_PORT", str(grpc_port))
        env.setdefault(prefix + "MCP_PORT", str(mcp_port))
        llm = self.children.get("llm_orchestration")
        ks = self.children.get("knowledge_store")
        if name == "knowledge_store" and llm:
            env["NUCLEUS_KS_LLM_TARGET"] = llm.address["grpc"]
            env.setdefault("NUCLEUS_KS_DATA_DIR", str(self.data_dir / "knowledge_store"))
        if name == "rag_pipeline" and llm and ks:
            env["NUCLEUS_RAG_LLM_TARGET"] = llm.address["grpc"]
            env["NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET"] = ks.address["grpc"]
        return env

    def start(self, timeout_s: float = 180.0) -> dict[str, dict]:
        for name in SERVICES:
            child = Child(name, self._env(name), self.run_dir / f"{name}.ready.json", self.run_dir / f"{name}.log")
            self.children[name] = child
            child.start()
            try:
                child.wait_ready(timeout_s)
            except Exception:
                self.stop()
                raise
            log.info("%s healthy at %s", name, child.address["grpc"])
        self._write_state()
        return {n: c.address for n, c in self.children.items()}

    def _write_state(self) -> None:
        state = {"supervisor_pid": os.getpid(), "data_dir": str(self.data_dir),
                 "services": {n: c.address for n, c in self.children.items()}}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)

    def monitor(self, stop_flag: list[bool], max_restarts: int = 5) -> None:
        """Restart children that die, until asked to stop."""
        while not stop_flag[0]:
            for child in self.children.values():
                if child.proc is not None and child.proc.poll() is not None and not stop_flag[0]:
                    if child.restarts >= max_restarts:
                        log.error("%s died %d times; giving up", child.name, child.restarts)
                        stop_flag[0] = True
                        break
                    child.restarts += 1
                    log.warning("%s exited (%s); restart %d", child.name, child.proc.returncode, child.restarts)
                    time.sleep(min(2 ** child.restarts * 0.1, 5))
                    # Restart on the same ports so dependants keep their targets.
                    child.env[_prefix(child.name) + "GRPC_PORT"] = child.address["grpc"].rsplit(":", 1)[1]
                    if child.address.get("mcp"):
                        child.env[_prefix(child.name) + "MCP_PORT"] = child.address["mcp"].rsplit(":", 1)[1].split("/")[0]
                    child.start()
                    try:
                        child.wait_ready(120)
                    except Exception as err:  # noqa: BLE001 - logged; next loop retries
                        log.error("%s restart failed: %s", child.name, err)
                    self._write_state()
            time.sleep(0.5)

    def stop(self) -> None:
        for name in reversed(SERVICES):
            child = self.children.get(name)
            if child is not None:
                child.stop()
        self.state_file.unlink(missing_ok=True)


ENV_PREFIXES = {"llm_orchestration": "NUCLEUS_LLM_", "knowledge_store": "NUCLEUS_KS_", "rag_pipeline": "NUCLEUS_RAG_"}


def _prefix(name: str) -> str:
    return ENV_PREFIXES[name]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m cli.supervisor")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--ephemeral-ports", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    supervisor = Supervisor(args.data_dir, ephemeral_ports=args.ephemeral_ports, host=args.host)
    stop_flag = [False]

    def on_signal(signum, frame):  # noqa: ARG001
        stop_flag[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        supervisor.start()
    except Exception as err:  # noqa: BLE001 - report and exit non-zero
        log.error("stack failed to start: %s", err)
        sys.exit(1)
    supervisor.monitor(stop_flag)
    supervisor.stop()


if __name__ == "__main__":
    main()
