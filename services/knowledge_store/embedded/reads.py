"""Reads of the rows a tenant keeps besides its documents (ranking profiles and models, personas,
source votes): one read transaction on a worker thread, and "nothing" for a tenant that has no
store yet rather than NotFound (a read never creates a store; writes.py does).
"""
from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from services.knowledge_store.embedded.tenants import Tenants
from shared.errors import NotFound

T = TypeVar("T")


async def read_stored(tenants: Tenants, tenant_id: str, read: Callable[[sqlite3.Connection], T], *, absent: T,
                      action: str = "search") -> T:
    """`read(conn)` inside one read transaction of the tenant's SQLite; `absent` when the tenant
    has no store. `action` names the read in fault messages (storage/db.py)."""
    try:
        tenant = await tenants.get(tenant_id)
    except NotFound:
        return absent

    def run() -> T:
        with tenant.db.read(action) as conn:
            return read(conn)

    return await asyncio.to_thread(run)
