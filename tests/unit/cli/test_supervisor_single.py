"""`--mode single`: the supervisor runs one process hosting the three services and treats it as it
treats a service — restarted after kill -9 with every hosted service back on its own ports,
back-off, marked failed when it keeps crashing — while stack.json still lists each service
with its own addresses and the state of the process hosting it. A real child process (a small
stand-in announcing the three services' addresses as services/single_process does); the
supervisor's clock is set by the test."""
from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from cli.restarts import FAILED, RUNNING, WAITING, RestartPolicy
from cli.supervisor import SERVICES, Supervisor, default_mode
from shared.settings import CliSettings, LlmOrchestrationSettings
from shared.errors import InvalidArgument

# Announces each service at the port its prefix names (0 = "pick one": 4000 + its index).
SINGLE = """
import json, os, signal, sys
ready = sys.argv[sys.argv.index("--ready-file") + 1]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
services = {}
for i, (name, prefix) in enumerate((("llm_orchestration", "NUCLEUS_LLM_"), ("knowledge_store", "NUCLEUS_KS_"),
                                    ("rag_pipeline", "NUCLEUS_RAG_"))):
    port = os.environ.get(prefix + "GRPC_PORT", "0")
    mcp = os.environ.get(prefix + "MCP_PORT", "0")
    services[name] = {"service": name, "grpc": "127.0.0.1:" + (port if port != "0" else str(4000 + i)),
                      "mcp": "http://127.0.0.1:" + (mcp if mcp != "0" else str(5000 + i)) + "/mcp",
                      "pid": os.getpid(), "tls": False}
with open(ready + ".tmp", "w") as f:
    json.dump({"service": "single", "pid": os.getpid(), "tls": False, "services": services}, f)
os.replace(ready + ".tmp", ready)
while True:
    signal.pause()
"""
POLICY = RestartPolicy(max_restarts=2, window_s=60.0, base_delay_s=1.0, max_delay_s=4.0, start_timeout_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def supervisor(tmp_path, clock):
    sup = Supervisor(tmp_path, ephemeral_ports=True, policy=POLICY, clock=clock, mode="single",
                     commands={"single": [sys.executable, "-c", SINGLE]}, probe=lambda name, address: True)
    sup.start(timeout_s=30)
    yield sup
    sup.stop()


def _kill(sup: Supervisor) -> int:
    proc = sup.children["single"].proc
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return proc.pid


def _until_running(sup: Supervisor, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sup.supervision["single"].state != RUNNING:
        assert time.monotonic() < deadline, sup.supervision["single"]
        sup.poll()
        time.sleep(0.01)


def test_stack_json_lists_each_hosted_service_with_its_addresses_and_the_process_state(supervisor):
    state = json.loads(supervisor.state_file.read_text())
    assert state["mode"] == "single"
    assert list(state["services"]) == list(SERVICES)
    assert [a["grpc"] for a in state["services"].values()] == ["127.0.0.1:4000", "127.0.0.1:4001", "127.0.0.1:4002"]
    assert {a["pid"] for a in state["services"].values()} == {supervisor.children["single"].proc.pid}
    assert set(state["supervision"]) == set(SERVICES)
    assert {s["state"] for s in state["supervision"].values()} == {RUNNING}
    assert {s["log_file"] for s in state["supervision"].values()} == {str(supervisor.run_dir / "single.log")}


def test_a_killed_single_process_is_restarted_with_every_service_on_its_ports(supervisor, clock):
    before = supervisor.addresses()
    old = _kill(supervisor)
    supervisor.poll()
    assert supervisor.supervision["single"].state == WAITING
    clock.now += POLICY.base_delay_s
    _until_running(supervisor)
    after = supervisor.addresses()
    assert supervisor.children["single"].proc.pid != old
    assert {n: (a["grpc"], a["mcp"]) for n, a in after.items()} == {n: (a["grpc"], a["mcp"]) for n, a in before.items()}
    env = supervisor.children["single"].env
    assert (env["NUCLEUS_KS_GRPC_PORT"], env["NUCLEUS_RAG_MCP_PORT"]) == ("4001", "5002")   # pinned, per service
    state = json.loads(supervisor.state_file.read_text())
    assert {s["restarts"] for s in state["supervision"].values()} == {1}


def test_a_single_process_that_keeps_crashing_is_marked_failed(supervisor, clock):
    for _ in range(POLICY.max_restarts):
        _kill(supervisor)
        supervisor.poll()
        clock.now += POLICY.max_delay_s
        _until_running(supervisor)
    _kill(supervisor)
    supervisor.poll()
    assert supervisor.supervision["single"].state == FAILED
    state = json.loads(supervisor.state_file.read_text())
    assert {s["state"] for s in state["supervision"].values()} == {FAILED}


def test_an_unknown_mode_is_refused_naming_the_accepted_ones(tmp_path, monkeypatch):
    with pytest.raises(InvalidArgument, match="mode: must be 'single'.*or 'split'.*got 'both'"):
        Supervisor(tmp_path, mode="both")
    monkeypatch.setenv("NUCLEUS_MODE", "triple")
    with pytest.raises(InvalidArgument, match="got 'triple' \\(--mode or NUCLEUS_MODE\\)"):
        default_mode(CliSettings())


def test_the_supervisor_runs_split_unless_told_while_nucleus_up_defaults_to_single(tmp_path, monkeypatch):
    monkeypatch.delenv("NUCLEUS_MODE", raising=False)
    split = Supervisor(tmp_path)                 # what the test suite's and benchmarks' stacks use
    assert (split.mode, split.units) == ("split", SERVICES)
    assert default_mode(CliSettings()) == "single"            # `nucleus up` / `make run`
    monkeypatch.setenv("NUCLEUS_MODE", "single")
    assert Supervisor(tmp_path).units == ("single",)


def test_one_process_runs_the_model_with_one_worker_a_batch_ahead_and_small_query_batches():
    """SINGLE_LAYOUT with the local model (not settings any more: issue 41); an API's embeddings
    are batched as in split mode."""
    from services.llm_orchestration.microbatch import SINGLE_LAYOUT, SPLIT_LAYOUT
    from services.single_process.main import model_layout

    layout = model_layout(LlmOrchestrationSettings())
    assert (layout.concurrent_workers, layout.ahead, layout.query_max_size) == (1, 1, 4)
    assert layout == SINGLE_LAYOUT
    assert (SPLIT_LAYOUT.concurrent_workers, SPLIT_LAYOUT.ahead, SPLIT_LAYOUT.query_max_size) == (0, 0, 0)
    assert model_layout(LlmOrchestrationSettings(embedding_provider="openai")) == SPLIT_LAYOUT
