"""Local supervisor used by `nucleus up`: starts the three services in dependency order
(LlmOrchestration -> KnowledgeStore -> RAGPipeline), waits until each is healthy over
grpc.health.v1, records their addresses in `<data_dir>/run/stack.json`, and stops them all
gracefully on SIGTERM/SIGINT.

A service that exits is restarted on the same ports, with exponential back-off inside a rate
window; one that keeps crashing is marked failed and left stopped while the other services
keep serving (cli/restarts.py). The supervisor never stops the stack on its own. stack.json
records each service's state (running, starting, waiting, failed) and why, for `nucleus
status`; SIGHUP (`nucleus up` on a running stack) gives failed services another try. The
monitor loop is `poll()` on an injected clock, so tests drive it without waiting.

Two deployment modes, one codebase (docs/SCALE.md): `split` runs each service as its own process
(as the compose and Kubernetes manifests do); `single` runs one process
(services/single_process) hosting all three, each still serving its own gRPC service and MCP
endpoint at the same addresses, calling each other in process. The supervisor treats that
process as one unit (restarts, back-off, failed state) and records every service it hosts in
stack.json as it records a service of its own (`mode` says which mode runs).

Restarts and failed services are also on the supervisor's own /metrics (cli/supervisor_metrics.py,
port NUCLEUS_SUPERVISOR_METRICS_PORT, default 8060; its URL is `supervisor_metrics` in stack.json).

    python -m cli.supervisor --data-dir .nucleus-data [--ephemeral-ports] [--mode single|split]
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cli.restarts import FAILED, RUNNING, STARTING, WAITING, RestartPolicy, Supervision, clean_exit, describe_exit
from cli.supervisor_metrics import DEFAULT_PORT as SUPERVISOR_METRICS_PORT
from cli.supervisor_metrics import SupervisorMetrics

from shared.auth.service_identity import ensure_identities
from shared.errors import InvalidArgument
from shared.healthcheck import health_ok
from shared.tls import make_local_ca
from shared.settings import CliSettings, default_data_dir, settings_from_env, warn_unknown_env

log = logging.getLogger("nucleus.supervisor")

SERVICES = ("llm_orchestration", "knowledge_store", "rag_pipeline")
MODULES = {
    "llm_orchestration": "services.llm_orchestration.main",
    "knowledge_store": "services.knowledge_store.main",
    "rag_pipeline": "services.rag_pipeline.main",
    "single": "services.single_process.main",        # the three services in one process
}
MODES = ("split", "single")
SINGLE = "single"
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
    argv: list[str] | None = None                     # default: the service's module
    probe: Callable[[dict], bool] | None = None       # default: grpc.health.v1 SERVING

    def start(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        out = open(self.log_file, "ab")
        argv = self.argv or [sys.executable, "-m", MODULES[self.name]]
        self.proc = subprocess.Popen(
            [*argv, "--ready-file", str(self.ready_file)],
            env=self.env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        out.close()

    @property
    def addresses(self) -> dict[str, dict]:
        """The address of every service this process hosts (one, or all three in single mode)."""
        return dict(self.address.get("services") or {self.name: self.address}) if self.address else {}

    def ready_address(self) -> dict | None:
        """The addresses the process announced, once it answers SERVING; None until then."""
        try:
            address = json.loads(self.ready_file.read_text())
        except (OSError, ValueError):
            return None
        if self.probe is not None:
            healthy = self.probe(address)
        else:
            hosted = address.get("services") or {self.name: address}
            healthy = all(health_ok(a["grpc"], GRPC_NAMES[n], ca_file=self.env.get(ENV_PREFIXES[n] + "TLS_CA_FILE"))
                          for n, a in hosted.items())
        if not healthy:
            return None
        self.address = address
        return address

    def where(self) -> str:
        return ", ".join(a.get("grpc", "") for a in self.addresses.values())

    def wait_ready(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} {describe_exit(self.proc.returncode)}; see {self.log_file}")
            address = self.ready_address()
            if address is not None:
                return address
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not healthy after {timeout_s:.0f}s; see {self.log_file}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

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
                 extra_env: dict[str, str] | None = None, policy: RestartPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic, commands: dict[str, list[str]] | None = None,
                 probe: Callable[[str, dict], bool] | None = None, mode: str | None = None) -> None:
        """`policy`: restarts (cli/restarts.py); `clock`: the monitor's time; `commands`: argv per
        service instead of its module; `probe(name, address)`: readiness instead of grpc.health;
        `mode`: "split" (a process per service) or "single" (one process hosting all three);
        None: NUCLEUS_MODE, else "split" (`nucleus up` passes `default_mode()`). The supervisor's
        settings (CliSettings) are read from the environment, `extra_env` winning over it."""
        self.extra_env = extra_env or {}
        self.settings = settings_from_env(CliSettings, self.extra_env)
        self.mode = check_mode(mode or self.settings.mode.strip().lower() or "split")
        self.units = SERVICES if self.mode == "split" else (SINGLE,)     # the processes, in start order
        self.policy = policy or RestartPolicy.from_settings(self.settings)
        self.clock = clock
        self.commands = commands or {}
        self.probe = probe
        self.supervision: dict[str, Supervision] = {}
        self.retry_requested = False            # set by SIGHUP: give failed services another try
        self.data_dir = data_dir.resolve()
        self.run_dir = self.data_dir / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = self.run_dir / "stack.json"
        self.host = host
        self.ephemeral = ephemeral_ports
        self.children: dict[str, Child] = {}
        self.metrics: SupervisorMetrics | None = None       # its /metrics, once started

    def _env(self, name: str) -> dict[str, str]:
        if name == SINGLE:          # one environment for the three: each service reads its own prefix
            env: dict[str, str] = {}
            for service in SERVICES:
                env.update(self._service_env(service))
            env.setdefault("NUCLEUS_KS_DATA_DIR", str(self.data_dir / "knowledge_store"))
            return env
        return self._service_env(name)

    def _service_env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env.setdefault("NUCLEUS_DATA_DIR", str(self.data_dir))
        grpc_port, mcp_port = (0, 0) if self.ephemeral else DEFAULT_PORTS[name]
        prefix = _prefix(name)
        env.setdefault(prefix + "HOST", self.host)
        env.setdefault(prefix + "GRPC_PORT", str(grpc_port))
        env.setdefault(prefix + "MCP_PORT", str(mcp_port))
        if self.tls_dir is not None:           # TLS on every port, certificates from a local CA
            for key, suffix in (("TLS_CERT_FILE", ".pem"), ("TLS_KEY_FILE", ".key")):
                env[prefix + key] = str(self.tls_dir / f"{name}{suffix}")
            env[prefix + "TLS_CA_FILE"] = str(self.tls_dir / "ca.pem")
        if self.identity_dir is not None:      # authentication on every port of the stack
            env[prefix + "IDENTITY_DIR"] = str(self.identity_dir)
            env["NUCLEUS_RAG_REQUIRE_AUTH"] = "1"
        llm = self.children.get("llm_orchestration")
        ks = self.children.get("knowledge_store")
        if name == "knowledge_store" and llm:
            env["NUCLEUS_KS_LLM_TARGET"] = llm.address["grpc"]
            env.setdefault("NUCLEUS_KS_DATA_DIR", str(self.data_dir / "knowledge_store"))
        if name == "rag_pipeline" and llm and ks:
            env["NUCLEUS_RAG_LLM_TARGET"] = llm.address["grpc"]
            env["NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET"] = ks.address["grpc"]
        return env

    @property
    def identity_dir(self) -> Path | None:
        """Where the stack's key pairs and trust bundle live when authentication is required
        (NUCLEUS_REQUIRE_AUTH or NUCLEUS_RAG_REQUIRE_AUTH); None: authentication is off."""
        return self.settings.resolved_identity_dir(self.data_dir) if self.settings.require_auth else None

    @property
    def tls_dir(self) -> Path | None:
        """Where the local CA and the services' certificates live with NUCLEUS_TLS=1; None: plaintext."""
        return self.data_dir / "tls" if self.settings.tls else None

    def start(self, timeout_s: float = 180.0) -> dict[str, dict]:
        if self.identity_dir is not None:
            ensure_identities(self.identity_dir)
        if self.tls_dir is not None:
            make_local_ca(self.tls_dir, SERVICES, (self.host, "127.0.0.1", "localhost"))
        for name in self.units:
            probe = self.probe
            child = Child(name, self._env(name), self.run_dir / f"{name}.ready.json", self.run_dir / f"{name}.log",
                          argv=self.commands.get(name),
                          probe=(lambda address, name=name: probe(name, address)) if probe else None)
            self.children[name] = child
            child.start()
            try:
                child.wait_ready(timeout_s)
            except Exception:
                self.stop()
                raise
            self.supervision[name] = Supervision(name, self.policy)
            log.info("%s healthy at %s", name, child.where())
        self._start_metrics()
        self._write_state()
        return self.addresses()

    def _hosts(self) -> dict[str, Supervision]:
        """Service name -> the Supervision of the process hosting it (one each, or one for all)."""
        return {n: self.supervision[unit] for unit, c in list(self.children.items())
                for n in (c.addresses or {unit: {}}) if unit in self.supervision}

    def _start_metrics(self) -> None:
        """The supervisor's /metrics (cli/supervisor_metrics.py): restarts and failed services."""
        port = self.settings.supervisor_metrics_port
        if port is None:
            port = 0 if self.ephemeral else SUPERVISOR_METRICS_PORT
        if port < 0:
            return
        metrics = SupervisorMetrics(self._hosts, self.identity_dir, clock=self.clock)
        try:
            metrics.start(self.host, port)
        except OSError as err:
            log.warning("supervisor metrics not served on %s:%d (%s)", self.host, port, err.strerror)
            return
        self.metrics = metrics

    def addresses(self) -> dict[str, dict]:
        """Each service's announced addresses, by service name (in either mode)."""
        return {n: a for c in self.children.values() for n, a in c.addresses.items()}

    def _write_state(self) -> None:
        now = self.clock()
        hosts = {n: unit for unit, c in self.children.items() for n in (c.addresses or {unit: {}})}
        state = {"supervisor_pid": os.getpid(), "data_dir": str(self.data_dir), "mode": self.mode,
                 "supervisor_metrics": self.metrics.url if self.metrics is not None else "",
                 "services": self.addresses(),
                 "supervision": {n: {**self.supervision[unit].snapshot(now),
                                     "log_file": str(self.children[unit].log_file)}
                                 for n, unit in hosts.items() if unit in self.supervision},
                 "restart_policy": self.policy.describe(),
                 "tls_ca_file": str(self.tls_dir / "ca.pem") if self.tls_dir is not None else ""}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)

    def monitor(self, stop_flag: list[bool], interval_s: float = 0.25) -> None:
        """Poll the services until asked to stop; it never stops the stack on its own."""
        while not stop_flag[0]:
            self.poll()
            time.sleep(interval_s)

    def poll(self) -> None:
        """One round: notice exits, start services whose back-off is over, notice readiness
        (cli/restarts.py); stack.json is rewritten when a state changed."""
        if self.retry_requested:
            self.retry_requested = False
            self.retry_failed()
        now = self.clock()
        changed = False
        for name in self.units:
            child, sup = self.children.get(name), self.supervision.get(name)
            if child is None or sup is None:
                continue
            try:
                changed |= self._poll_one(child, sup, now)
            except Exception:  # noqa: BLE001 - one service's trouble must not stop the monitor
                log.exception("supervising %s failed; trying again", name)
        if changed:
            self._write_state()

    def _poll_one(self, child: Child, sup: Supervision, now: float) -> bool:
        code = child.proc.poll() if child.proc is not None else None
        if sup.state == RUNNING:
            if code is None:
                return False
            if clean_exit(code):
                sup.exited_cleanly(now, describe_exit(code))
                log.info("%s %s", child.name, sup.reason)
            else:
                self._crashed(child, sup, now, describe_exit(code))
            return True
        if sup.state == STARTING:
            if code is not None:
                self._crashed(child, sup, now, f"{describe_exit(code)} while starting")
            elif child.ready_address() is not None:
                sup.ready()
                log.info("%s healthy again at %s (restart %d)", child.name, child.where(), sup.restarts)
            elif now >= sup.deadline:
                child.kill()
                self._crashed(child, sup, now, f"not healthy within {self.policy.start_timeout_s:g}s")
            else:
                return False
            return True
        if sup.state == WAITING and now >= sup.next_start:
            self._pin_ports(child)
            child.start()
            sup.starting(now)
            log.info("%s restarting (restart %d)", child.name, sup.restarts)
            return True
        return False

    def _crashed(self, child: Child, sup: Supervision, now: float, why: str) -> None:
        sup.crashed(now, why)
        if sup.state == FAILED:
            log.error("%s failed: %s; the other services keep serving. See %s; `nucleus up` tries it again",
                      child.name, sup.reason, child.log_file)
        else:
            log.warning("%s %s", child.name, sup.reason)

    def _pin_ports(self, child: Child) -> None:
        """Restart on the same ports, so the services that call it keep their targets."""
        for name, address in child.addresses.items():
            prefix = _prefix(name)
            if address.get("grpc"):
                child.env[prefix + "GRPC_PORT"] = address["grpc"].rsplit(":", 1)[1]
            if address.get("mcp"):
                child.env[prefix + "MCP_PORT"] = address["mcp"].rsplit(":", 1)[1].split("/")[0]

    def retry_failed(self) -> list[str]:
        """Give every failed service another try (its crash window starts afresh)."""
        now = self.clock()
        names = [name for name, sup in self.supervision.items() if sup.state == FAILED]
        for name in names:
            self.supervision[name].retry(now)
            log.warning("%s: another try requested", name)
        if names:
            self._write_state()
        return names

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        for sup in self.supervision.values():
            sup.stopped()
        for name in reversed(self.units):
            child = self.children.get(name)
            if child is not None:
                child.stop()
        self.state_file.unlink(missing_ok=True)


ENV_PREFIXES = {"llm_orchestration": "NUCLEUS_LLM_", "knowledge_store": "NUCLEUS_KS_", "rag_pipeline": "NUCLEUS_RAG_"}


def _prefix(name: str) -> str:
    return ENV_PREFIXES[name]


DEFAULT_MODE = "single"     # measured better on one machine: docs/BENCHMARKS.md, "Deployment modes"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgument("mode", f"must be 'single' (one process) or 'split' (a process per service), "
                                      f"got {mode!r} (--mode or NUCLEUS_MODE)")
    return mode


def default_mode(settings: CliSettings) -> str:
    """The deployment mode `nucleus up` uses unless told: NUCLEUS_MODE, else DEFAULT_MODE."""
    return check_mode(settings.mode.strip().lower() or DEFAULT_MODE)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m cli.supervisor")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--ephemeral-ports", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--mode", choices=MODES, default=default_mode(settings_from_env(CliSettings)),
                        help="single: the three services in one process; split: a process each "
                             "(default: $NUCLEUS_MODE, else %(default)s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    warn_unknown_env(log)
    supervisor = Supervisor(args.data_dir, ephemeral_ports=args.ephemeral_ports, host=args.host, mode=args.mode)
    stop_flag = [False]

    def on_signal(signum, frame):  # noqa: ARG001
        stop_flag[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda *_: setattr(supervisor, "retry_requested", True))
    try:
        supervisor.start()
    except Exception as err:  # noqa: BLE001 - report and exit non-zero
        log.error("stack failed to start: %s", err)
        sys.exit(1)
    supervisor.monitor(stop_flag)
    supervisor.stop()


if __name__ == "__main__":
    main()
