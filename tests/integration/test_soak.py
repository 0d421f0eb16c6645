"""`python -m benchmarks.soak` for a few seconds against the suite's session stack (--use-running):
it prints a row per interval and reads every acknowledged write back."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from tests.support.processes import ROOT

pytestmark = [pytest.mark.integration]

WORDS = ("basalt", "penguin", "espresso", "glacier", "violin", "sourdough", "tornado", "chess", "honeybee", "sonar")


def test_a_short_soak_prints_its_rows_and_loses_no_write(tmp_path, stack_data_dir, stack):
    with (tmp_path / "corpus.jsonl").open("w") as f:
        for i in range(30):
            text = f"Note {i} on {WORDS[i % 10]} and {WORDS[(i * 3) % 10]}: what it is, where it is found."
            f.write(json.dumps({"_id": f"d{i}", "title": f"Note {i}", "text": text}) + "\n")
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": w, "text": f"about {w}"}) + "\n"
                                                    for w in WORDS))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--use-running", "--data-dir", str(stack_data_dir),
         "--dataset", str(tmp_path), "--docs", "30", "--tenant", "soak-itest", "--seconds", "4", "--interval", "2",
         "--clients", "2", "--seed", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+\s+\d+\s", line)]
    assert len(rows) == 2 and all(len(r) == 15 for r in rows), out
    assert all(int(r[7]) > 0 and r[10] == "0" for r in rows), out           # searches answered, none failed
    counts = re.search(r"(\d+) acknowledged writes, (\d+) acknowledged deletes; read back (\d+) artifacts: "
                       r"(\d+) lost writes, (\d+) resurrected deletes", out)
    assert counts, out
    writes, _, read_back, lost, resurrected = map(int, counts.groups())
    assert writes > 0 and read_back > 0 and lost == 0 and resurrected == 0, out
    assert "PASS  lost writes == 0" in out and "PASS  errors == 0" in out
