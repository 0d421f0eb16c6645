"""Real processes on 127.0.0.1 with ephemeral ports, started by the same supervisor as `nucleus up`."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.supervisor import Supervisor
from tests.support.processes import stop_stack

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "corpus"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


#: The deployment mode of the suite's stacks: NUCLEUS_TEST_MODE=single|split (default split, the
#: mode the whole suite is run green on; tests/integration/test_single_process.py runs a
#: representative set on single in every run).
MODE = os.environ.get("NUCLEUS_TEST_MODE", "split").strip().lower() or "split"
if MODE not in ("single", "split"):
    raise pytest.UsageError(f"NUCLEUS_TEST_MODE must be 'single' or 'split', got {MODE!r}")


@pytest.fixture(scope="session")
def stack_data_dir(tmp_path_factory) -> Path:
    """The data directory of the session `stack` (its run/stack.json is what `--use-running` reads)."""
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def stack(stack_data_dir):
    """The three services, started once for the integration session (in NUCLEUS_TEST_MODE)."""
    data_dir = stack_data_dir
    supervisor = Supervisor(data_dir, ephemeral_ports=True, extra_env={"NUCLEUS_LOCAL_TENANT": "itest"}, mode=MODE)
    addresses = supervisor.start(timeout_s=240)
    yield addresses
    stop_stack(supervisor)


@pytest.fixture(scope="session")
def demo_docs():
    from shared.documents import iter_paths, load_document

    return [load_document(p) for p in iter_paths(DEMO)]


# The authenticated stack of the RAG tool / security / Inspector tests (tests/integration/secure_stack.py).
from tests.integration.secure_stack import secure_corpus, secure_rag, secure_stack  # noqa: E402,F401
from tests.integration.secure_stack import begin_secure_stack  # noqa: E402
from tests.support import background  # noqa: E402
from tests.support.mcp_clients import close_held_clients  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
async def _held_stdio_clients():
    """The stdio MCP servers tests share (tests/support/mcp_clients.py `held_stdio_client`), stopped
    at the session's end."""
    yield
    await close_held_clients()


@pytest.fixture(scope="session", autouse=True)
def _stacks_in_the_background(request, tmp_path_factory):
    """At the first integration test, begin in the background (one at a time, in the order the
    session's tests first use them) the stacks its later modules need: the secure stack, and each
    module's own stack where the module defines `begin_in_background(tmp_path_factory)`. Each
    first user waits for the rest of its stack's start, not all of it (tests/support/background.py)."""
    begun: set[object] = set()
    for item in request.session.items:
        module = getattr(item, "module", None)
        if module is not None and module not in begun and hasattr(module, "begin_in_background"):
            begun.add(module)
            module.begin_in_background(tmp_path_factory)
        if "secure_stack" in item.fixturenames and "secure_stack" not in begun:
            begun.add("secure_stack")
            begin_secure_stack(tmp_path_factory)
    yield
    background.stop_untaken()
