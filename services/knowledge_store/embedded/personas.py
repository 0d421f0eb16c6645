"""Persona agents' settings in the embedded backend: one JSON value per persona in the tenant's
`meta` table (key "persona:<id>"), written in the tenant's ordinary write transaction
(writes.py), so it is durable and tenant-scoped like everything else the store holds. The
record and its checks are the front's (../personas.py).
"""
from __future__ import annotations

import time
from dataclasses import replace

from services.knowledge_store import validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.reads import read_stored
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, write
from services.knowledge_store.personas import Persona, check
from shared.errors import InvalidArgument, NotFound

KEY_PREFIX = "persona:"


class Personas:
    """The store's persona settings (a mixin of core.KnowledgeStore: `self._tenants` is the store's)."""

    _tenants: Tenants

    async def put_persona(self, persona: Persona) -> Persona:
        """Store a persona agent's settings (replacing earlier ones); returns them as stored."""
        persona = replace(check(persona), updated_unix=int(time.time()))

        def work(conn):
            storage.db.set_meta(conn, KEY_PREFIX + persona.persona_id, persona.to_json())
            return persona, NO_CHANGE

        return await write(self._tenants, persona.tenant_id, work, create=True, action="persona write")

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        """A persona's settings; NotFound when it has none."""
        validation.tenant_id(tenant_id)
        if not persona_id:
            raise InvalidArgument("persona_id", "is required")
        validation.persona_id(persona_id)
        text = await read_stored(self._tenants, tenant_id,
                                 lambda conn: storage.db.get_meta(conn, KEY_PREFIX + persona_id),
                                 absent=None, action="persona read")
        if text is None:
            raise NotFound(f"persona '{persona_id}' does not exist for tenant '{tenant_id}'")
        return Persona.from_json(tenant_id, text)

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        validation.tenant_id(tenant_id)

        def read(conn) -> list[tuple[str, str]]:
            return conn.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ? ORDER BY key",
                                (KEY_PREFIX, KEY_PREFIX[:-1] + chr(ord(KEY_PREFIX[-1]) + 1))).fetchall()

        rows = await read_stored(self._tenants, tenant_id, read, absent=[], action="persona read")
        return [Persona.from_json(tenant_id, value) for _, value in rows]
