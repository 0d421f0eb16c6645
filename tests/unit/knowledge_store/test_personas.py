"""Persona agents' settings in the KnowledgeStore (services/knowledge_store/personas.py)."""
from __future__ import annotations

import asyncio

import pytest

from services.knowledge_store.personas import Persona
from shared.errors import InvalidArgument, NotFound


def test_put_get_list_replace_and_tenants_apart(store):
    async def go():
        stored = await store.put_persona(Persona("t1", "analyst", system_prompt="Be brief.",
                                                 allowed_tools=("rag_topics", "rag_topics", "rag_search"),
                                                 llm_model="m1"))
        assert stored.updated_unix > 0 and stored.allowed_tools == ("rag_topics", "rag_search")
        assert await store.get_persona("t1", "analyst") == stored
        await store.put_persona(Persona("t1", "analyst", system_prompt="Be thorough.", tools_disabled=True))
        await store.put_persona(Persona("t1", "buyer"))
        again = await store.get_persona("t1", "analyst")
        assert again.system_prompt == "Be thorough." and again.tools_disabled and again.llm_model == ""
        assert [p.persona_id for p in await store.list_personas("t1")] == ["analyst", "buyer"]
        assert await store.list_personas("t2") == []
        with pytest.raises(NotFound):
            await store.get_persona("t2", "analyst")
        with pytest.raises(NotFound):
            await store.get_persona("t1", "nobody")
    asyncio.run(go())


@pytest.mark.parametrize("persona, field", [
    (Persona("t1", ""), "persona_id"),
    (Persona("t1", "bad id!"), "persona_id"),
    (Persona("t1", "p", system_prompt="x" * 8_001), "system_prompt"),
    (Persona("t1", "p", allowed_tools=("ok", "not ok")), "allowed_tools[1]"),
    (Persona("t1", "p", allowed_sources=("",)), "allowed_sources[0]"),
    (Persona("t1", "p", llm_model="two words"), "llm_model"),
])
def test_invalid_personas_name_the_field(store, persona, field):
    with pytest.raises(InvalidArgument) as err:
        asyncio.run(store.put_persona(persona))
    assert err.value.field == field
