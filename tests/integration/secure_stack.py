"""The authenticated stack of the RAG tool, security, zero-trust and Inspector tests, as pytest
fixtures over the product builder `benchmarks.secure_stack` (which also serves `nucleus attack`):
principals, auth config, canary documents and the supervisor are made there; see its docstring
for the principal table and the auth config rules."""
from __future__ import annotations

import threading
from concurrent.futures import Future

import grpc
import httpx
import pytest

from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc

from benchmarks.secure_stack import (  # noqa: F401 - re-exported for the tests
    AUDIENCE,
    DEMO,
    GLOBEX_CANARY,
    ISSUER,
    LEGAL_CANARY,
    ROOT,
    SECURITY_TEAM_DOCS,
    USERS,
    SecureStack,
    extra_documents,
    globex_documents,
    ingest_corpus,
    start_secure_stack,
)
from tests.support.processes import stop_stack


class _Start:
    """The session's one start of the secure stack, in a background thread, once begun."""
    future: Future | None = None
    taken = False                          # `secure_stack` set it up (and its teardown stops it)


def begin_secure_stack(tmp_path_factory) -> Future:
    """Start the session's secure stack in a background thread (once), so that a session whose later
    modules need it gets it started while earlier modules run: the supervisor starts one service
    process at a time, leaving the second core idle. `secure_stack` waits for it."""
    if _Start.future is None:
        future: Future = Future()
        data_dir = tmp_path_factory.mktemp("secure-stack")

        def start() -> None:
            try:
                future.set_result(start_secure_stack(data_dir))
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits for the stack
                future.set_exception(err)

        threading.Thread(target=start, name="secure-stack-start", daemon=True).start()
        _Start.future = future
    return _Start.future


def stop_unused_secure_stack() -> None:
    """At the session's end: stop a secure stack begun in the background that no test set up (a
    session cut short, e.g. by -x); `secure_stack`'s teardown stops the one it set up."""
    if _Start.future is not None and not _Start.taken:
        try:
            _, supervisor = _Start.future.result()
        except Exception:  # noqa: BLE001 - it never started: nothing to stop
            return
        stop_stack(supervisor)


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory) -> SecureStack:
    starting = begin_secure_stack(tmp_path_factory)
    _Start.taken = True
    stack, supervisor = starting.result()
    yield stack
    stop_stack(supervisor)


@pytest.fixture(scope="session")
async def secure_corpus(secure_stack):
    """The corpus (benchmarks.secure_stack.corpus), ingested once."""
    await ingest_corpus(secure_stack)
    return secure_stack


def get(url: str, **kw) -> httpx.Response:
    return httpx.get(url, timeout=30, **kw)


@pytest.fixture
async def secure_rag(secure_corpus):
    """A gRPC stub of the secure stack's RAGPipeline (callers add their own `bearer`)."""
    channel = grpc.aio.insecure_channel(secure_corpus.addresses["rag_pipeline"]["grpc"])
    yield rag_grpc.RagPipelineStub(channel)
    await channel.close()


def bearer(stack: SecureStack, who: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata carrying `who`'s API key."""
    return (("authorization", f"Bearer {stack.keys[who]}"),)
