"""The authenticated stack of the RAG tool, security, zero-trust and Inspector tests, as pytest
fixtures over the product builder `benchmarks.secure_stack` (which also serves `nucleus attack`):
principals, auth config, canary documents and the supervisor are made there; see its docstring
for the principal table and the auth config rules."""
from __future__ import annotations

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
from tests.support import background
from tests.support.processes import stop_stack


def _start(data_dir):
    stack, supervisor = start_secure_stack(data_dir)
    return stack, lambda: stop_stack(supervisor)


def begin_secure_stack(tmp_path_factory) -> None:
    """Begin the session's secure stack in the background (tests/support/background.py)."""
    data_dir = tmp_path_factory.mktemp("secure-stack")
    background.begin("secure_stack", lambda: _start(data_dir))


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory) -> SecureStack:
    stack, stop = background.take("secure_stack", lambda: _start(tmp_path_factory.mktemp("secure-stack")))
    yield stack
    stop()


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
