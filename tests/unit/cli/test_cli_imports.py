"""The CLI starts without the libraries only some commands use: every `nucleus` process (and every
test that runs one) pays for what `cli.main` imports. The MCP SDK is imported where a command uses
it (`nucleus chat`/`ask`, the sources editor), never at start; neither is the model (torch)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LATER = ("mcp", "mcp_types", "torch", "sentence_transformers", "transformers", "lightgbm", "matplotlib")


def test_importing_the_cli_loads_neither_the_mcp_sdk_nor_the_model():
    code = ("import sys, cli.main\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({LATER!r})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"imported when the CLI starts: {done.stdout.strip()}"
