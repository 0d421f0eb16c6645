"""LlmOrchestration's call table (services/llm_orchestration/front.py `CALLS`): every call of the
front is in it, marked idempotent or not, names an RPC of the service, and has the clients'
signature with the caller first; the gRPC client retries exactly the idempotent calls."""
from __future__ import annotations

import inspect
import json

import pytest

from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from services.llm_orchestration import front
from services.llm_orchestration.client import IDEMPOTENT, LlmOrchestrationClient
from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
from services.rag_pipeline.ports import LanguageModel
from shared.grpc_client import channel_options
from shared.inprocess import InProcessCaller
from tests.support.call_tables import assert_every_call_is_in_the_table_and_marked


def test_every_call_of_the_front_is_in_the_table_and_marked():
    assert_every_call_is_in_the_table_and_marked(front.LlmFront, front.CALLS)


def test_every_rpc_named_is_one_of_the_service():
    service = llm_pb.DESCRIPTOR.services_by_name["LlmOrchestration"]
    assert service.full_name == front.RPC_SERVICE
    rpcs = {m.name for m in service.methods}
    assert {c.rpc for c in front.CALLS.values()} <= rpcs
    assert {c.rpc for c in front.CALLS.values()} == rpcs, "an RPC of the service that no call of the front makes"


def test_each_call_has_the_clients_signature_with_the_caller_first():
    """The gRPC client's signatures (the `LanguageModel` port's, and `embedding_model`, which the
    KnowledgeStore's embedder asks), the caller first and the deadline left to the adapter."""
    for name in front.CALLS:
        port = inspect.signature(getattr(LlmOrchestrationClient, name))
        if hasattr(LanguageModel, name):
            assert inspect.signature(getattr(LanguageModel, name)) == port, name
        own = inspect.signature(getattr(front.LlmFront, name))
        expected = [p for p in port.parameters.values() if p.name not in ("self", "timeout_s")]
        [_, caller, *rest] = own.parameters.values()
        assert caller.name == "p" and caller.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name
        assert [(p.name, p.kind, p.default) for p in rest] == [(p.name, p.kind, p.default) for p in expected], name


def test_the_grpc_client_retries_exactly_the_idempotent_calls():
    assert IDEMPOTENT == front.idempotent_methods()
    config = json.loads(dict(channel_options(IDEMPOTENT))["grpc.service_config"])
    [method] = config["methodConfig"]
    assert {f"/{n['service']}/{n['method']}" for n in method["name"]} == IDEMPOTENT
    assert "/nucleus.v1.LlmOrchestration/GenerateEmbeddings" in IDEMPOTENT
    assert "/nucleus.v1.LlmOrchestration/GenerateChatCompletion" not in IDEMPOTENT     # streamed, never resent


def test_the_in_process_client_serves_every_call_of_the_table_and_nothing_else():
    client = InProcessLlmOrchestrationClient(object(), InProcessCaller(None, "llm_orchestration", False), timeout_s=5)
    for name in front.CALLS:
        assert callable(getattr(client, name)), name
        assert callable(getattr(LlmOrchestrationClient, name)), name
    assert inspect.isasyncgenfunction(client.chat) and client.long_timeout_s >= 60.0   # a reply may take a while
    with pytest.raises(AttributeError, match="no call 'call'"):
        client.call
