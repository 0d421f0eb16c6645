"""Persona agents' settings, stored in the tenant's database beside its ranking profiles.

A persona is identified by the `persona_id` its ranking profiles already carry; this adds what
an agent acting as it needs: a system prompt, the tools it may call (or none), the sources it
consults and the LLM model it uses. Stored as one JSON value per persona in the tenant's
`meta` table (key "persona:<id>"), written in the tenant's ordinary write transaction
(writes.py), so it is durable and tenant-scoped like everything else the store holds.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import asdict, dataclass, replace

from typing import TYPE_CHECKING

from services.knowledge_store import storage, validation
from shared.errors import InvalidArgument, NotFound

if TYPE_CHECKING:          # the record is light (clients import it); the store functions need the store
    from services.knowledge_store.tenants import Tenants

KEY_PREFIX = "persona:"
MAX_PROMPT_CHARS = 8_000
MAX_NAME_CHARS = 200
MAX_LIST = 32
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SOURCE_CHARS = 256


@dataclass(frozen=True, slots=True)
class Persona:
    tenant_id: str
    persona_id: str
    display_name: str = ""
    system_prompt: str = ""
    allowed_tools: tuple[str, ...] = ()      # empty = the agent's default set
    allowed_sources: tuple[str, ...] = ()    # empty = every visible source
    llm_model: str = ""                      # "" = the configured chat model
    updated_unix: int = 0
    tools_disabled: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("tenant_id")
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, tenant_id: str, text: str) -> Persona:
        data = json.loads(text)
        return cls(tenant_id=tenant_id, persona_id=data["persona_id"], display_name=data.get("display_name", ""),
                   system_prompt=data.get("system_prompt", ""),
                   allowed_tools=tuple(data.get("allowed_tools", ())),
                   allowed_sources=tuple(data.get("allowed_sources", ())), llm_model=data.get("llm_model", ""),
                   updated_unix=int(data.get("updated_unix", 0)), tools_disabled=bool(data.get("tools_disabled")))


def check(p: Persona) -> Persona:
    """`p` validated (InvalidArgument names the field), lists de-duplicated."""
    validation.tenant_id(p.tenant_id)
    if not p.persona_id:
        raise InvalidArgument("persona_id", "is required")
    validation.persona_id(p.persona_id)
    if len(p.display_name) > MAX_NAME_CHARS:
        raise InvalidArgument("display_name", f"has {len(p.display_name)} characters, at most {MAX_NAME_CHARS}")
    if len(p.system_prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument("system_prompt", f"has {len(p.system_prompt)} characters, at most {MAX_PROMPT_CHARS}")
    for name, values in (("allowed_tools", p.allowed_tools), ("allowed_sources", p.allowed_sources)):
        if len(values) > MAX_LIST:
            raise InvalidArgument(name, f"{len(values)} entries, at most {MAX_LIST}")
    for i, tool in enumerate(p.allowed_tools):
        if not _TOOL.match(tool):
            raise InvalidArgument(f"allowed_tools[{i}]", f"{tool!r} is not a tool name (letters, digits, _ . -)")
    for i, source in enumerate(p.allowed_sources):
        if not source.strip() or len(source) > _SOURCE_CHARS:
            raise InvalidArgument(f"allowed_sources[{i}]", f"must be a source id of 1-{_SOURCE_CHARS} characters")
    if len(p.llm_model) > MAX_NAME_CHARS or any(c.isspace() for c in p.llm_model):
        raise InvalidArgument("llm_model", "must be a model name without spaces, at most 200 characters")
    return replace(p, allowed_tools=tuple(dict.fromkeys(p.allowed_tools)),
                   allowed_sources=tuple(dict.fromkeys(p.allowed_sources)))


async def put_persona(tenants: Tenants, persona: Persona) -> Persona:
    from services.knowledge_store.writes import NO_CHANGE, write

    persona = replace(check(persona), updated_unix=int(time.time()))

    def work(conn):
        storage.db.set_meta(conn, KEY_PREFIX + persona.persona_id, persona.to_json())
        return persona, NO_CHANGE

    return await write(tenants, persona.tenant_id, work, create=True, action="persona write")


async def get_persona(tenants: Tenants, tenant_id: str, persona_id: str) -> Persona:
    validation.tenant_id(tenant_id)
    if not persona_id:
        raise InvalidArgument("persona_id", "is required")
    validation.persona_id(persona_id)
    missing = NotFound(f"persona '{persona_id}' does not exist for tenant '{tenant_id}'")
    try:
        tenant = await tenants.get(tenant_id)
    except NotFound:
        raise missing from None

    def read() -> str | None:
        with tenant.db.read("persona read") as conn:
            return storage.db.get_meta(conn, KEY_PREFIX + persona_id)

    text = await asyncio.to_thread(read)
    if text is None:
        raise missing
    return Persona.from_json(tenant_id, text)


async def list_personas(tenants: Tenants, tenant_id: str) -> list[Persona]:
    validation.tenant_id(tenant_id)
    try:
        tenant = await tenants.get(tenant_id)
    except NotFound:
        return []

    def read() -> list[tuple[str, str]]:
        with tenant.db.read("persona read") as conn:
            return conn.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
                                (KEY_PREFIX, KEY_PREFIX[:-1] + chr(ord(KEY_PREFIX[-1]) + 1))).fetchall()

    return [Persona.from_json(tenant_id, value) for _, value in await asyncio.to_thread(read)]


__all__ = ["Persona", "check", "get_persona", "list_personas", "put_persona"]
