"""TLS on every port when certificates are configured: a stack started with NUCLEUS_TLS=1 (a
local CA made by the supervisor) serves gRPC over TLS and /mcp over HTTPS, its services call
each other over TLS, and a plaintext client gets nothing."""
from __future__ import annotations

import ssl

import grpc
import httpx
import pytest

from cli.supervisor import Supervisor
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.support import background
from tests.support.processes import stop_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _start(data_dir):
    supervisor = Supervisor(data_dir, ephemeral_ports=True, extra_env={"NUCLEUS_TLS": "1"})
    addresses = supervisor.start(timeout_s=240)
    return (addresses, supervisor.tls_dir / "ca.pem"), lambda: stop_stack(supervisor)


def begin_in_background(tmp_path_factory) -> None:
    """Begun at the session's first integration test (tests/integration/conftest.py)."""
    data_dir = tmp_path_factory.mktemp("tls-stack")
    background.begin("tls_stack", lambda: _start(data_dir))


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory):
    value, stop = background.take("tls_stack", lambda: _start(tmp_path_factory.mktemp("tls-stack")))
    yield value
    stop()


async def test_the_stack_works_end_to_end_over_tls(tls_stack):
    addresses, ca = tls_stack
    assert all(a["tls"] for a in addresses.values())
    ks = KnowledgeStoreClient(addresses["knowledge_store"]["grpc"], tls_ca_file=ca)
    try:
        await ks.ingest("tls", "", [DocumentIn(ArtifactMeta(artifact_id="tls-doc", title="Cipher suites"),
                                               "# Cipher suites\n\nThe gateway negotiates TLS 1.3 cipher suites.")])
    finally:
        await ks.close()
    credentials = grpc.ssl_channel_credentials(ca.read_bytes())
    async with grpc.aio.secure_channel(addresses["rag_pipeline"]["grpc"], credentials) as channel:
        response = await rag_grpc.RagPipelineStub(channel).SearchAndRank(
            rag_pb.SearchAndRankRequest(tenant_id="tls", user_query_text="which cipher suites"), timeout=60)
    assert response.results[0].associated_artifact.artifact_id == "tls-doc"
    assert not response.degraded        # RAGPipeline reached the store and the model over TLS


async def test_a_plaintext_client_is_refused(tls_stack):
    addresses, _ = tls_stack
    async with grpc.aio.insecure_channel(addresses["rag_pipeline"]["grpc"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rag_grpc.RagPipelineStub(channel).SearchAndRank(
                rag_pb.SearchAndRankRequest(tenant_id="tls", user_query_text="q"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mcp_is_served_over_https_with_the_stacks_certificate(tls_stack):
    addresses, ca = tls_stack
    url = addresses["rag_pipeline"]["mcp"]
    assert url.startswith("https://")
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "tls-test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    assert httpx.post(url, json=body, headers=headers, verify=ssl.create_default_context(cafile=str(ca)), timeout=30).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.post(url, json=body, headers=headers, timeout=30)           # the system CAs do not know it
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(url.replace("https://", "http://"), json=body, headers=headers, timeout=30)
