"""Persona agents' settings through the RAGPipeline (stored by the KnowledgeStore).

Writing a persona changes how every agent acting as it behaves: operators, or users with the
admin role, in their own tenant. Reading: any authenticated caller of the tenant (an agent
needs its persona's prompt and tools). Every store call carries an assertion of the caller,
so the store applies the same rules again (the caller policy of knowledge_store/front.py).
"""
from __future__ import annotations

from dataclasses import replace

from services.knowledge_store.personas import Persona
from services.rag_pipeline.core import RagPipeline
from shared.errors import PermissionDenied
from shared.identity import ADMIN, OPERATOR, Principal, acting_for


async def put_persona(pipeline: RagPipeline, ks, persona: Persona, principal: Principal | None) -> Persona:
    if principal is not None:
        persona = replace(persona, tenant_id=pipeline.tenant_for(persona.tenant_id, principal))
        if not (principal.has_role(OPERATOR) or principal.has_role(ADMIN)):
            raise PermissionDenied(f"changing a persona needs the '{ADMIN}' role or an operator credential")
    with acting_for(_in(principal, persona.tenant_id)):
        return await ks.put_persona(persona)


async def get_persona(pipeline: RagPipeline, ks, tenant_id: str, persona_id: str,
                      principal: Principal | None) -> Persona:
    tenant = pipeline.tenant_for(tenant_id, principal)
    with acting_for(_in(principal, tenant)):
        return await ks.get_persona(tenant, persona_id)


async def persona_model(pipeline: RagPipeline, ks, persona_id: str, principal: Principal | None) -> str:
    """The chat model of `persona_id` in the caller's tenant ("" = the stack's): chat (chat.py)
    resolves the persona as GetPersona does — the verified caller decides the tenant."""
    return (await get_persona(pipeline, ks, "", persona_id, principal)).llm_model


async def list_personas(pipeline: RagPipeline, ks, tenant_id: str, principal: Principal | None) -> list[Persona]:
    tenant = pipeline.tenant_for(tenant_id, principal)
    with acting_for(_in(principal, tenant)):
        return await ks.list_personas(tenant)


def _in(principal: Principal | None, tenant: str) -> Principal | None:
    """Whom the store is told the call is for, in `tenant`. An operator is asserted as an admin
    of that tenant (a service's calls carry no operator role; the store would refuse the write)."""
    if principal is None:
        return None
    if principal.has_role(OPERATOR):
        return replace(principal, tenant_id=tenant, roles=(ADMIN,), auth_method="on_behalf_of")
    return replace(principal, tenant_id=tenant)
