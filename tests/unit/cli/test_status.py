"""`nucleus status` shows what the supervisor says about each service (a failed one with why and
where its log is) and the KnowledgeStore's storage problems; `nucleus up` on a running stack
with a failed service asks the supervisor to try it again instead of starting a second stack."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from rich.console import Console

from cli import main as cli_main
from cli.status import service_table, store_lines
from services.knowledge_store.models import Problem, StoreStatus

REASON = "killed by SIGKILL; 11 crashes within 5 min (at most 10 restarts per 5 min): not restarted"


def state(tmp_path, pid: int) -> dict:
    return {
        "supervisor_pid": pid, "data_dir": str(tmp_path), "restart_policy": "at most 10 restarts per 5 min",
        "services": {n: {"grpc": f"127.0.0.1:{port}", "mcp": ""} for n, port in
                     (("llm_orchestration", 1), ("knowledge_store", 2), ("rag_pipeline", 3))},
        "supervision": {
            "llm_orchestration": {"state": "running", "restarts": 0, "reason": ""},
            "knowledge_store": {"state": "failed", "restarts": 10, "reason": REASON, "last_exit": "killed by SIGKILL"},
            "rag_pipeline": {"state": "waiting", "restarts": 2, "reason": "exited with code 1; restart 2 of 10",
                             "next_start_unix": 0},
        },
    }


def render(renderable) -> str:
    console = Console(record=True, width=400)
    console.print(renderable)
    return console.export_text()


def test_a_failed_service_is_shown_with_the_cause_and_its_log_and_fails_the_status(tmp_path):
    table, ok = service_table(state(tmp_path, os.getpid()), lambda name, address: name == "llm_orchestration")
    text = render(table)
    assert not ok
    assert f"FAILED: {REASON}; log {tmp_path / 'run' / 'knowledge_store.log'}" in text
    assert "restarting: exited with code 1; restart 2 of 10" in text
    assert "restarts: at most 10 restarts per 5 min" in text


def test_a_dead_supervisor_is_reported_as_a_stale_stack(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    table, ok = service_table(state(tmp_path, gone.pid), lambda name, address: False)
    assert "supervisor not running" in render(table) and not ok


def test_storage_problems_name_the_tenant_the_kind_and_the_path():
    status = StoreStatus(state="degraded", data_dir="/data/ks", read_only=False, free_bytes=5 << 30,
                         total_bytes=100 << 30, repaired_rows=3, open_tenants=2,
                         problems=(Problem("bad", "corrupt", "tenant 'bad' is corrupted: /data/ks/tenants/bad/"
                                                              "store.sqlite (file is not a database)", 0),))
    text = render("\n".join(store_lines(status)))
    assert "storage DEGRADED (1 problem): data directory /data/ks, 5.0 GiB free" in text
    assert "tenant bad corrupt: tenant 'bad' is corrupted: /data/ks/tenants/bad/store.sqlite" in text


def test_nucleus_status_exits_non_zero_and_says_failed(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "stack.json").write_text(json.dumps(state(tmp_path, os.getpid())))
    assert cli_main.main(["--data-dir", str(tmp_path), "status"]) == 6
    assert "FAILED" in capsys.readouterr().out


def test_nucleus_up_on_a_stack_with_a_failed_service_asks_its_supervisor_to_retry(tmp_path):
    supervisor = subprocess.Popen([sys.executable, "-c", "import signal, sys\n"
                                   "signal.signal(signal.SIGHUP, lambda *_: sys.exit(42))\n"
                                   "print('listening', flush=True)\nsignal.pause()"],
                                  stdout=subprocess.PIPE, text=True)
    try:
        assert supervisor.stdout.readline() == "listening\n"      # its SIGHUP handler is in place
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "stack.json").write_text(json.dumps(state(tmp_path, supervisor.pid)))
        assert cli_main.main(["--data-dir", str(tmp_path), "up", "--detach"]) == 0
        assert supervisor.wait(timeout=30) == 42                 # it received SIGHUP
        assert (tmp_path / "run" / "stack.json").exists()        # and no second stack was started
    finally:
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGKILL)
            supervisor.wait(timeout=30)
        supervisor.stdout.close()
