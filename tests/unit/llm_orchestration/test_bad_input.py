"""Bad input is rejected with InvalidArgument naming the field, before any model work."""
import pytest

from services.llm_orchestration.core import LlmOrchestrator
from shared.errors import InvalidArgument
from shared.settings import LlmOrchestrationSettings


@pytest.fixture
def orchestrator() -> LlmOrchestrator:
    # Not started: validation must come first, so no model is needed to reject input.
    return LlmOrchestrator(LlmOrchestrationSettings(max_texts_per_request=4, max_embed_texts=4, max_text_chars=50))


@pytest.mark.parametrize("texts,field,problem", [
    ([], "texts", "at least one text is required"),
    (["a", "b", "c", "d", "e"], "texts", "5 texts; at most 4 per request"),
    (["ok", "fine", "good", ""], "texts[3]", "empty text"),
    (["ok", "   \n\t"], "texts[1]", "empty text"),
    (["ok", "lone \ud800 surrogate"], "texts[1]", "not valid UTF-8"),
    (["x" * 51], "texts[0]", "51 characters; at most 50 are accepted"),
    (["ok", 7], "texts[1]", "expected a string, got int"),
    ("a single string", "texts", "expected a list of strings"),
])
async def test_embed_rejects_bad_texts_naming_the_field(orchestrator, texts, field, problem):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.embed(texts)
    assert info.value.field == field
    assert problem in str(info.value)
    assert str(info.value).startswith(f"{field}: ")


async def test_one_embedding_call_is_bounded_by_default_naming_texts_and_the_bound():
    orchestrator = LlmOrchestrator(LlmOrchestrationSettings())      # defaults: 256 texts per call
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.embed([f"text {i}" for i in range(257)])
    assert info.value.field == "texts" and "257 texts; at most 256 per request" in str(info.value)


async def test_embed_rejects_an_unknown_purpose(orchestrator):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.embed(["ok"], purpose="passage")
    assert info.value.field == "purpose"


@pytest.mark.parametrize("query,max_alternatives,field", [
    ("", 3, "query"), ("  ", 3, "query"), ("bad \udfff", 3, "query"),
    ("fine", 5, "max_alternatives"), ("fine", -1, "max_alternatives"),
])
async def test_expand_rejects_bad_query_or_count(orchestrator, query, max_alternatives, field):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.expand(query, max_alternatives)
    assert info.value.field == field


@pytest.mark.parametrize("candidates,field", [
    ([], "candidates"),
    ([("a", "x"), ("a", "y")], "candidates[1].id"),
    ([("", "x")], "candidates[0].id"),
    ([("a", "x"), ("b", " ")], "candidates[1].text"),
    ([("a", "x")] * 0 + [(str(i), "t") for i in range(5)], "candidates"),
])
async def test_rerank_rejects_bad_candidates(orchestrator, candidates, field):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.rerank("query", candidates)
    assert info.value.field == field


@pytest.mark.parametrize("query,passages,kwargs,field", [
    ("", [("p", "t", "x")], {}, "query"),
    ("q", [], {}, "passages"),
    ("q", [("p", "t", "x"), ("p", "t", "y")], {}, "passages[1].id"),
    ("q", [("p", "t", "")], {}, "passages[0].text"),
    ("q", [("p", "t", "x")], {"max_chars": -1}, "max_chars"),
    ("q", [("p", "t", "x")], {"style": "poem"}, "style"),
])
async def test_synthesize_rejects_bad_input(orchestrator, query, passages, kwargs, field):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.synthesize(query, passages, **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("settings,field", [
    (LlmOrchestrationSettings(chat_model="gpt-x"), "openai_base_url"),
    (LlmOrchestrationSettings(embedding_provider="openai"), "openai_base_url"),
    (LlmOrchestrationSettings(max_attempts=0), "max_attempts"),
])
def test_unusable_settings_are_rejected_up_front(settings, field):
    with pytest.raises(InvalidArgument) as info:
        LlmOrchestrator(settings)
    assert info.value.field == field


async def test_synthesis_max_chars_beyond_int32_names_the_field(orchestrator):
    with pytest.raises(InvalidArgument) as info:
        await orchestrator.synthesize("q", [("p1", "", "text")], max_chars=2**40)
    assert info.value.field == "max_chars"
