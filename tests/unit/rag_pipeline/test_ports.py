"""The ports are the pipeline's only view of its dependencies: the gRPC clients and the
in-process adapters have their signatures, and only the composition root imports a client."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.front import CALLS, StoreFront
from services.llm_orchestration.client import LlmOrchestrationClient
from services.rag_pipeline import ports
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel

PACKAGE = Path(ports.__file__).parent
CLIENT_MODULES = {"services.knowledge_store.client", "services.llm_orchestration.client"}
COMPOSITION_ROOT = PACKAGE / "main.py"


def port_methods(port: type) -> list[str]:
    return sorted(name for name, value in vars(port).items() if inspect.iscoroutinefunction(value))


def parameters(fn) -> list[tuple[str, inspect._ParameterKind, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_ports_name_exactly_the_calls_the_pipeline_makes():
    assert port_methods(KnowledgeSource) == [
        "close", "get_entries", "get_entries_with_vectors", "get_field_signals", "get_peer_entries", "get_persona",
        "get_profile", "get_ranking_model", "list_personas", "list_profiles", "put_persona", "put_profile",
        "record_feedback",
        "record_search", "record_source_feedback", "retrieve", "score_keywords", "source_votes", "stats",
        "store_status", "topics"]
    assert port_methods(LanguageModel) == ["close", "embed", "expand", "rerank", "rerankers", "synthesize"]


@pytest.mark.parametrize("port,implementation", [
    (KnowledgeSource, KnowledgeStoreClient),
    (LanguageModel, LlmOrchestrationClient),
    (LanguageModel, InProcessLanguageModel),
])
def test_each_implementation_has_the_ports_signatures_parameter_for_parameter(port, implementation):
    for name in port_methods(port):
        method = getattr(implementation, name, None)
        assert inspect.iscoroutinefunction(method), f"{implementation.__name__}.{name} is not a coroutine"
        assert parameters(method) == parameters(getattr(port, name)), f"{implementation.__name__}.{name}"


def test_the_front_serves_each_store_call_of_the_port_with_its_parameters():
    """The in-process adapters are generic (a wrapper per call of the front's table): the front's
    method takes the caller first, then the port's parameters (the deadline is the adapter's)."""
    for name in port_methods(KnowledgeSource):
        if name == "close":
            continue
        assert name in CALLS, f"the front's call table has no {name}"
        port = [p for p in parameters(getattr(KnowledgeSource, name))[1:] if p[0] != "timeout_s"]
        assert parameters(getattr(StoreFront, name))[2:] == port, f"StoreFront.{name}"
    assert inspect.iscoroutinefunction(InProcessKnowledge.retrieve)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_only_the_composition_root_imports_the_grpc_clients():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "core.py" in modules and PACKAGE / "tools" / "service.py" in modules
    importers = {str(path.relative_to(PACKAGE)) for path in modules if imported_modules(path) & CLIENT_MODULES}
    assert importers == {str(COMPOSITION_ROOT.relative_to(PACKAGE))}
