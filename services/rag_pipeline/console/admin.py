"""The console's admin routes: the profile editor and history, the federation's sources, the registries.

    GET  /console/admin/profile?persona=&name=    one profile: the editor (every field) and its history
    POST /console/admin/profile                   save: the next version, or the errors field by field
    GET  /console/admin/sources                   the tenant's remote sources: state, contract, last probe, errors
    GET  /console/admin/sources/edit?id=          one source's editable fields (source_form.py)
    POST /console/admin/sources/enable|disable|edit   one source (the federation editor's rules, audited)
    POST /console/admin/sources/reload            the sources file read again now
    GET  /console/admin/registries                the MCP registries' servers (operators)
    POST /console/admin/registries/import         one registry server added as a source (operators)

Admin pages need the admin role of the session's tenant (or the operator's credential); the
registries are the operator's. Every POST carries the CSRF token (`ConsoleApp.page`). Source
changes go through the federation's own editor (`federation/admin.py`, the rules of
docs/FEDERATION.md "Editing sources"), exactly as the admin MCP tools do.
"""
from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.rag_pipeline.console import admin_views, views
from services.rag_pipeline.console.profile_form import editable_fields, form_values
from services.rag_pipeline.console.sessions import Session
from services.rag_pipeline.console.source_form import EDIT_FIELDS, changes_of, values_of
from services.rag_pipeline.federation.admin import runtime_editor
from services.rag_pipeline.federation.registry import (RegistryClient, RegistryError, import_server,
                                                       load_registries, registries_path)
from services.rag_pipeline.federation.source_config import SourcesFileError
from shared.errors import InvalidArgument, NotFound, Unavailable

MAX_FORM_FIELDS = 64                 # the editor has a field per RankingProfile field, and more may come
REGISTRY_TIMEOUT_S = 10.0
BROWSE_LIMIT = 30
SOURCE_ACTIONS = ("enable", "disable", "reload", "edit")


class AdminPages:
    """Handlers over a `ConsoleApp` (its session, role and CSRF checks, rendering and form reading)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def runtime(self) -> Any:
        return self.app.c.federation

    def _tenant(self, session: Session, params: Any) -> str:
        return self.app.tenant(session, params) or session.principal.tenant_id

    # ------------------------------------------------------------------ profiles
    async def _profile_page(self, req: Request, session: Session, tenant: str, persona: str, name: str, *,
                            values: dict[str, Any] | None = None, errors: dict[str, str] | None = None,
                            stored: Any = None, status: int = 200) -> Response:
        history = None
        if name and tenant:
            try:
                history = await admin_views.profile_history(self.app.c.pipeline, tenant, persona, name)
            except NotFound:
                if values is None:
                    raise
        if values is None:
            values = form_values(history["latest"] if history else None)
        query = f"?{urlencode({'tenant': tenant})}" if self.app.tenant(session, {"tenant": tenant}) else ""
        return self.app.render(req, "profile.html", status=status, session=session, tenant=tenant, name=name,
                               persona=persona, fields=editable_fields(), values=values, errors=errors or {},
                               history=history, stored=stored, tenant_query=query, form={"tenant": tenant})

    async def profile(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            p = req.query_params
            return await self._profile_page(req, session, self._tenant(session, p), p.get("persona", "").strip(),
                                            p.get("name", "").strip())
        return await self.app.page(request, run, admin=True)

    async def save_profile(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            form = req.state.form
            tenant = self._tenant(session, form)
            if not tenant:
                raise InvalidArgument("tenant", "name the tenant whose profile this is")
            stored, values, errors = await admin_views.store_profile(self.app.c.pipeline, session.principal,
                                                                     tenant, form)
            persona = str(values.get("persona_id", "")).strip()
            name = str(values.get("name", "")).strip()
            if errors:
                return await self._profile_page(req, session, tenant, persona, name, values=values, errors=errors,
                                                status=400)
            return await self._profile_page(req, session, tenant, stored.persona_id, stored.name, stored=stored)
        return await self.app.form_page(request, run, max_fields=MAX_FORM_FIELDS, admin=True)

    # ------------------------------------------------------------------ sources
    def _runtime(self) -> Any:
        if self.runtime is None:
            raise Unavailable("this RAGPipeline runs without the federation (no sources file)")
        return self.runtime

    async def _sources_page(self, req: Request, session: Session, *, done: str = "", status: int = 200) -> Response:
        runtime = self._runtime()
        listed = runtime.status(session.principal)
        rows = [{**s.model_dump(), "last_probe_at": views.when(s.last_probe)} for s in listed.sources]
        return self.app.render(req, "sources.html", status=status, session=session, sources=rows,
                               version=listed.version, last_error=listed.last_error, done=done,
                               loaded_at=views.when(listed.loaded_at))

    async def sources(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            return await self._sources_page(req, session)
        return await self.app.page(request, run, admin=True)

    def _managed_source(self, session: Session, source_id: str) -> Any:
        """The source as the caller manages it (another tenant's is unknown, as in the editor)."""
        config = self._runtime().registry.current()
        found = next((s for s in config.of_tenant(session.principal) if s.id == source_id), None)
        if found is None:
            raise NotFound(f"no source {source_id!r} among the sources you manage")
        return found

    async def _edit_page(self, req: Request, session: Session, source_id: str, *, values: dict[str, str] | None = None,
                         errors: dict[str, str] | None = None, status: int = 200) -> Response:
        source = self._managed_source(session, source_id)
        entry = runtime_editor(self._runtime()).readable(session.principal, source)
        return self.app.render(req, "source_edit.html", status=status, session=session, source_id=source_id,
                               entry=entry, fields=EDIT_FIELDS, values=values or values_of(entry), errors=errors or {})

    async def source_edit(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            return await self._edit_page(req, session, req.query_params.get("id", "").strip())
        return await self.app.page(request, run, admin=True)

    async def _save_source(self, req: Request, session: Session, source_id: str) -> Response:
        form = req.state.form
        editor = runtime_editor(self._runtime())
        entry = editor.readable(session.principal, self._managed_source(session, source_id))
        try:
            changes, cleared = changes_of(entry, form)
            if changes or cleared:
                await asyncio.to_thread(editor.edit, session.principal, source_id, changes, cleared,
                                        tool="console sources edit")
        except InvalidArgument as err:
            named = err.field if err.field in dict(EDIT_FIELDS) else "_form"
            values = {name: str(form.get(name, "")) for name, _ in EDIT_FIELDS}
            return await self._edit_page(req, session, source_id, values=values, status=400,
                                         errors={named: str(err).partition(": ")[2] or str(err)})
        result = await self._runtime().reload(session.principal)
        what = ", ".join([*changes, *cleared]) or "nothing"
        return await self._sources_page(req, session, done=f"edited {source_id}: {what} (configuration "
                                                            f"v{result.version})")

    async def source_change(self, request: Request) -> Response:
        action = request.path_params["action"]

        async def run(req: Request, session: Session) -> Response:
            if action not in SOURCE_ACTIONS:
                raise NotFound(f"no such action {action!r}; one of {', '.join(SOURCE_ACTIONS)}")
            runtime = self._runtime()
            who = session.principal
            if action == "reload":
                result = await runtime.reload(who)
                done = (f"reloaded: configuration v{result.version}, {result.sources} sources"
                        + (f"; error: {result.error}" if result.error else ""))
                return await self._sources_page(req, session, done=done)
            source_id = str(req.state.form.get("id", "")).strip()
            if not source_id:
                raise InvalidArgument("id", "name the source to change")
            if action == "edit":
                return await self._save_source(req, session, source_id)
            editor = runtime_editor(runtime)
            try:
                await asyncio.to_thread(editor.set_enabled, who, source_id, action == "enable",
                                        tool=f"console sources {action}")
            except SourcesFileError as err:
                raise InvalidArgument(err.field_name or "source", err.reason) from None
            result = await runtime.reload(who)
            return await self._sources_page(req, session, done=f"{action}d {source_id} (configuration "
                                                                f"v{result.version})")
        return await self.app.form_page(request, run, max_fields=MAX_FORM_FIELDS, admin=True)

    # ------------------------------------------------------------------ registries (operator)
    def _registries(self) -> tuple[Any, list[Any]]:
        path = self._runtime().registry.path
        try:
            return path, load_registries(registries_path(path))
        except SourcesFileError as err:
            raise InvalidArgument("registries", err.reason) from None

    async def registries(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            p = req.query_params
            form = {"q": p.get("q", "")[:200], "registry": p.get("registry", ""), "cursor": p.get("cursor", "")[:500]}
            _, registries = self._registries()
            result = None
            if "browse" in p:
                chosen = [r for r in registries if not form["registry"] or r.name == form["registry"]]
                if not chosen:
                    raise InvalidArgument("registry", f"one of {', '.join(r.name for r in registries) or '(none)'}")
                if form["cursor"] and len(chosen) != 1:
                    raise InvalidArgument("cursor", "a cursor belongs to one registry: choose the registry")
                result = await asyncio.to_thread(RegistryClient(timeout_s=REGISTRY_TIMEOUT_S).browse, chosen,
                                                 search=form["q"], limit=BROWSE_LIMIT, cursor=form["cursor"])
            servers = [{"s": s, "why": s.importable()[1], "ok": s.importable()[0] is not None}
                       for s in (result.servers if result else [])]
            return self.app.render(req, "registries.html", session=session, registries=registries, form=form,
                                   result=result, servers=servers)
        return await self.app.page(request, run, operator=True)

    async def registry_import(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            f = req.state.form
            path, registries = self._registries()
            registry = next((r for r in registries if r.name == str(f.get("registry", ""))), None)
            if registry is None:
                raise InvalidArgument("registry", f"one of {', '.join(r.name for r in registries) or '(none)'}")
            groups = [g.strip() for g in str(f.get("groups", "")).split(",") if g.strip()]
            tenants = [t.strip() for t in str(f.get("tenants", "")).split(",") if t.strip()]
            editor = runtime_editor(self._runtime())
            try:
                server = await asyncio.to_thread(RegistryClient(timeout_s=REGISTRY_TIMEOUT_S).find, registry,
                                                 str(f.get("name", "")), str(f.get("version", "")))
                source = await asyncio.to_thread(
                    import_server, path, server, slug=str(f.get("slug", "")).strip(), groups=groups,
                    tenants=tenants, audit=editor.audit, principal=session.principal,
                    stack_tenants=editor.stack_tenants)
            except SourcesFileError as err:
                raise InvalidArgument(err.field_name or "source", err.reason) from None
            except RegistryError as err:
                raise InvalidArgument("name", str(err)) from None
            result = await self._runtime().reload(session.principal)
            return await self._sources_page(req, session, done=f"imported {server.name} {server.version} as "
                                                                f"{source.id} (configuration v{result.version})")
        return await self.app.form_page(request, run, max_fields=MAX_FORM_FIELDS, operator=True)


def admin_routes(app: Any) -> list[Route]:
    pages = AdminPages(app)
    return [
        Route("/admin/profile", pages.profile, methods=["GET"]),
        Route("/admin/profile", pages.save_profile, methods=["POST"]),
        Route("/admin/sources", pages.sources, methods=["GET"]),
        Route("/admin/sources/edit", pages.source_edit, methods=["GET"]),
        Route("/admin/sources/{action:str}", pages.source_change, methods=["POST"]),
        Route("/admin/registries", pages.registries, methods=["GET"]),
        Route("/admin/registries/import", pages.registry_import, methods=["POST"]),
    ]


__all__ = ["AdminPages", "admin_routes"]
