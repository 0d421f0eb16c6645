"""The Compare page's query-set routes beside app.py's: deleting a stored set, and evaluating a
dataset the operator lists in the configuration (datasets.py).

    POST /console/compare/stored/delete    a stored set of the tenant: its uploader or the tenant's admin
    POST /console/compare/dataset          a listed dataset, named by its name only, under profiles A and B

Both POSTs carry the CSRF token (`ConsoleApp.page`); the tenant is the session's verified one
(an operator names it); a set another tenant holds is answered 404, a set of another user of the
tenant 403 to a non-admin; a dataset is only ever a name of the tenant's list (a path or another
name: 400 naming the field).
"""
from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from services.rag_pipeline.console.sessions import Session
from shared.errors import Unavailable


class ComparePages:
    """Handlers over a `ConsoleApp` (its session, role and CSRF checks, rendering, evaluation)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def delete_stored(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            form = req.state.form
            tenant = self.app.set_tenant(session, form)
            await asyncio.to_thread(self.app.query_sets().delete, tenant, str(form.get("set", "")),
                                    session.principal.user_id, admin=self.app.is_admin(session.principal))
            query = f"?{urlencode({'tenant': tenant})}" if self.app.tenant(session, form) else ""
            return RedirectResponse(f"/console/compare{query}", status_code=303)
        return await self.app.form_page(request, run)

    async def dataset(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            form = req.state.form
            if self.app.c.datasets is None:
                raise Unavailable("the operator lists no datasets for the console (NUCLEUS_RAG_CONSOLE_DATASETS)")
            tenant = self.app.set_tenant(session, form)
            _, queries, _ = await asyncio.to_thread(self.app.c.datasets.queries, tenant,
                                                    str(form.get("dataset", "")).strip())
            return await self.app.evaluate_set(req, session, form, queries)
        return await self.app.form_page(request, run)


def compare_routes(app: Any) -> list[Route]:
    pages = ComparePages(app)
    return [
        Route("/compare/stored/delete", pages.delete_stored, methods=["POST"]),
        Route("/compare/dataset", pages.dataset, methods=["POST"]),
    ]


__all__ = ["ComparePages", "compare_routes"]
