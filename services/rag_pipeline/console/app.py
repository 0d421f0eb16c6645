"""The console's routes: login / logout, search & explain, compare, query-set evaluation, profiles (admin).

    console_routes(console) -> [Route, Mount]     added to the RAGPipeline's HTTP port (ServiceSpec.http_routes)

    GET  /console                    -> /console/ (-> search, or login)
    GET  /console/login, POST        a credential (API key or JWT) for a server-side session
    POST /console/logout             the session revoked server-side
    GET  /console/search             query, top k, profile: explained results, timings
    GET  /console/compare            one query under two profiles, side by side, RBO
    POST /console/compare/set        an uploaded JSONL query set (<= 1 MiB): nDCG@10 / recall@10 deltas
    POST /console/compare/stored, /compare/stored/delete, /compare/dataset   a stored set, its deletion,
                                     a dataset the operator lists (compare_pages.py)
    GET  /console/admin/profiles, POST   the tenant's ranking profiles (role admin or operator)
    GET  /console/admin/tenant       stats, the store's condition, the last folder runs (role admin or operator)
    ...  /console/admin/profile, /admin/sources..., /admin/registries...   admin.py (editor, sources, registries)
    GET  /console/topics             the interactive topic map and a topic's members
    GET  /console/traces             recent SearchAndRank traces, slowest first (operators)
    GET  /console/traces/<trace id>  one trace as a waterfall across the services (operators)
    GET  /console/static/...         the stylesheet and topics.js (shipped in the package)

Every POST carries the session's CSRF token (403 without it); every response carries the
strict CSP of security.py. docs/CONSOLE.md has the security model.
"""
from __future__ import annotations

import asyncio
import logging
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ranking.inputs import FUSIONS as RANKING_FUSIONS
from services.rag_pipeline.console import traces, views
from services.rag_pipeline.console.admin import admin_routes
from services.rag_pipeline.console.compare_pages import compare_routes
from services.rag_pipeline.console.datasets import ConsoleDatasets
from services.rag_pipeline.console.evaluation import MAX_QUERY_SET_BYTES, parse_query_set
from services.rag_pipeline.console.login import Credentials
from services.rag_pipeline.console.query_sets import EvalRuns, QuerySets
from services.rag_pipeline.console.security import (COOKIE, HEADERS, PRELOGIN_COOKIE, SecurityHeaders,
                                                    clear_session_cookie, client_address, csrf_ok,
                                                    login_transport_ok, set_session_cookie)
from services.rag_pipeline.console.sessions import LoginLimiter, Session, SessionStore
from services.rag_pipeline.console.topic_map import topic_map
from services.rag_pipeline.core import RagPipeline
from shared.errors import (InvalidArgument, NotFound, NucleusError, PermissionDenied, ResourceExhausted,
                           Unauthenticated, Unavailable)
from shared.identity import ADMIN, OPERATOR, Principal, local_principal
from shared.ratelimit import RateLimiter, rate_key

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
MAX_FORM_BYTES = 64 * 1024
MULTIPART_OVERHEAD = 64 * 1024
FUSIONS = ("", *RANKING_FUSIONS)     # "" = the profile's own; the rest as ranking accepts them
INLINE_QUERIES = 25                 # a longer query set runs in the background, with progress


@dataclass
class Console:
    """What the console needs from the composition root (services/rag_pipeline/main.py)."""

    pipeline: RagPipeline
    credentials: Credentials | None          # None: authentication is off, the local principal is used
    limiter: RateLimiter | None = None       # the service's per-caller limiter (searches count)
    trace_dir: Path | None = None            # the services' local trace files (None: not written)
    federation: Any = None                   # the FederationRuntime (sources pages; None: no federation)
    topics: Any = None                       # the TopicTools (topics page; None: not offered)
    data_dir: Path | None = None             # where `nucleus ingest` records each tenant's last runs (None: not read)
    datasets: ConsoleDatasets | None = None  # the judged datasets the operator lists (None: none)
    runs: EvalRuns = field(default_factory=EvalRuns)     # query-set evaluations in the background
    sessions: SessionStore = field(default_factory=SessionStore)
    logins: LoginLimiter = field(default_factory=LoginLimiter)

    @property
    def auth_on(self) -> bool:
        return self.credentials is not None


_STATUS = ((InvalidArgument, 400), (Unauthenticated, 401), (PermissionDenied, 403), (NotFound, 404),
           (ResourceExhausted, 429), (Unavailable, 503))


def _env() -> Environment:
    env = Environment(loader=PackageLoader("services.rag_pipeline.console", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["num"] = lambda v, d=3: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"
    env.filters["signed"] = lambda v, d=3: f"{v:+.{d}f}"
    env.filters["when"] = views.when
    return env


class ConsoleApp:
    def __init__(self, console: Console) -> None:
        self.c = console
        self.env = _env()

    # ------------------------------------------------------------------ plumbing
    def render(self, request: Request, template: str, status: int = 200, session: Session | None = None,
               **ctx: Any) -> HTMLResponse:
        principal = session.principal if session else None
        html = self.env.get_template(template).render(
            session=session, principal=principal, auth_on=self.c.auth_on, csrf=session.csrf if session else "",
            is_admin=_is_admin(principal), is_operator=bool(principal and principal.has_role(OPERATOR)),
            sees_traces=bool(principal and (principal.has_role(OPERATOR) or not self.c.auth_on)),
            needs_tenant=_needs_tenant(principal), **ctx)
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, status: int, message: str, session: Session | None = None) -> HTMLResponse:
        return self.render(request, "error.html", status=status, session=session, status_code=status, message=message)

    def session_of(self, request: Request) -> Session | None:
        return self.c.sessions.get(request.cookies.get(COOKIE))

    async def page(self, request: Request, handler: Callable[[Request, Session], Awaitable[Response]], *,
                   admin: bool = False, operator: bool = False, post: bool = False) -> Response:
        """Resolve the session (or log in), check role and CSRF, run `handler`, map core errors."""
        new_cookie = None
        session = self.session_of(request)
        if session is None:
            if self.c.auth_on:
                if post:
                    return self.error(request, 403, "your session has ended; log in again")
                return RedirectResponse("/console/login", status_code=303)
            session = self.c.sessions.create(local_principal())
            new_cookie = session
        if admin and not _is_admin(session.principal):
            return self.error(request, 403, "this page needs the admin role of your tenant", session)
        if operator and self.c.auth_on and not session.principal.has_role(OPERATOR):
            return self.error(request, 403, "this page needs the stack operator's credential", session)
        if post:
            form = getattr(request.state, "form", None)
            if form is None or not csrf_ok(session.csrf, form.get("csrf")):
                return self.error(request, 403, "the form's CSRF token is missing or wrong; reload the page", session)
        try:
            response = await handler(request, session)
        except NucleusError as err:
            status = next((code for kind, code in _STATUS if isinstance(err, kind)), 502)
            response = self.error(request, status, str(err), session)
        if new_cookie is not None:
            set_session_cookie(response, request, COOKIE, new_cookie.session_id, int(self.c.sessions.idle_s))
        return response

    async def form_page(self, request: Request, handler: Callable[[Request, Session], Awaitable[Response]], *,
                        max_fields: int = 16, admin: bool = False, operator: bool = False) -> Response:
        """A form POST: its form read into `request.state.form` (413 when too large), then `page(post=True)`."""
        request.state.form = await self.read_form(request, MAX_FORM_BYTES, max_fields)
        if request.state.form is None:
            return self.error(request, 413, "the form is too large", self.session_of(request))
        return await self.page(request, handler, admin=admin, operator=operator, post=True)

    async def read_form(self, request: Request, limit: int, max_fields: int = 16) -> FormData | None:
        """The request's form, read up to `limit` bytes and `max_fields` fields (None: larger than that)."""
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return None
        replay = bytes(body)

        async def receive() -> dict[str, Any]:
            nonlocal replay
            chunk, replay = replay, b""
            return {"type": "http.request", "body": chunk, "more_body": False}

        parsed = Request(request.scope, receive)
        return await parsed.form(max_files=1, max_fields=max_fields, max_part_size=limit)

    def tenant(self, session: Session, params: Any) -> str:
        """The principal's tenant; only an operator credential naming none picks one (the core checks)."""
        if _needs_tenant(session.principal):
            return str(params.get("tenant", "")).strip()
        return ""

    def rate(self, session: Session) -> None:
        key = rate_key(session.principal)
        if self.c.limiter is not None and key is not None:
            self.c.limiter.check(key, what="console searches")

    # ------------------------------------------------------------------ login / logout
    async def root(self, request: Request) -> Response:
        return RedirectResponse("/console/search", status_code=303)

    async def login_form(self, request: Request) -> Response:
        if not self.c.auth_on:
            return RedirectResponse("/console/search", status_code=303)
        if self.session_of(request) is not None:
            return RedirectResponse("/console/search", status_code=303)
        token = secrets.token_urlsafe(32)
        response = self.render(request, "login.html", login_csrf=token, transport_ok=login_transport_ok(request))
        set_session_cookie(response, request, PRELOGIN_COOKIE, token, 600)
        return response

    async def login(self, request: Request) -> Response:
        if self.c.credentials is None:
            return RedirectResponse("/console/search", status_code=303)
        if not login_transport_ok(request):
            return self.error(request, 403, "log in over HTTPS (plain HTTP is accepted on loopback only)")
        if not self.c.logins.allow(client_address(request)):
            return self.error(request, 429, "too many login attempts from your address; wait a minute")
        form = await self.read_form(request, MAX_FORM_BYTES)
        if form is None:
            return self.error(request, 413, "the form is too large")
        if not csrf_ok(request.cookies.get(PRELOGIN_COOKIE), form.get("csrf")):
            return self.error(request, 403, "the login form's CSRF token is missing or wrong; reload the page")
        old = request.cookies.get(COOKIE)
        try:
            principal, expires_at = self.c.credentials.check(str(form.get("credential", "")))
        except Unauthenticated as err:
            token = secrets.token_urlsafe(32)
            response = self.render(request, "login.html", status=401, login_csrf=token, message=str(err),
                                   transport_ok=True)
            set_session_cookie(response, request, PRELOGIN_COOKIE, token, 600)
            return response
        self.c.sessions.revoke(old)                      # no fixation: a fresh id at every login
        session = self.c.sessions.create(principal, expires_at)
        log.info("console login: %s/%s (%s)", principal.tenant_id, principal.user_id, principal.auth_method)
        response = RedirectResponse("/console/search", status_code=303)
        lifetime = int(session.expires_at - session.created_at)
        set_session_cookie(response, request, COOKIE, session.session_id, lifetime)
        clear_session_cookie(response, request, PRELOGIN_COOKIE)
        return response

    async def logout(self, request: Request) -> Response:
        request.state.form = await self.read_form(request, MAX_FORM_BYTES)

        async def run(req: Request, session: Session) -> Response:
            self.c.sessions.revoke(session.session_id)
            response = RedirectResponse("/console/login" if self.c.auth_on else "/console/search", status_code=303)
            clear_session_cookie(response, req, COOKIE)
            return response

        return await self.page(request, run, post=True)

    # ------------------------------------------------------------------ pages
    async def search(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            p = req.query_params
            form = {"q": p.get("q", ""), "k": p.get("k", "10"), "profile": p.get("profile", ""),
                    "tenant": p.get("tenant", ""), "why_not": p.get("why_not", "")}
            result = why = None
            if form["q"].strip():
                self.rate(session)
                args = dict(query=form["q"], top_k=_top_k(form["k"]), profile=form["profile"].strip(),
                            tenant=self.tenant(session, p))
                result = await views.search(self.c.pipeline, session.principal, **args)
                if form["why_not"].strip():       # the why-not panel (docs/CONSOLE.md)
                    why = await views.why_not_panel(self.c.pipeline, session.principal, ids=form["why_not"], **args)
            return self.render(req, "search.html", session=session, form=form, result=result, why=why)
        return await self.page(request, run)

    async def compare(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            p = req.query_params
            form = {"q": p.get("q", ""), "k": p.get("k", "10"), "a": p.get("a", ""), "b": p.get("b", ""),
                    "tenant": p.get("tenant", "")}
            result = None
            if form["q"].strip():
                self.rate(session)
                result = await views.compare(self.c.pipeline, session.principal, query=form["q"],
                                             top_k=_top_k(form["k"]), profile_a=form["a"].strip(),
                                             profile_b=form["b"].strip(), tenant=self.tenant(session, p))
            stored, datasets = [], []
            if session.principal.tenant_id or form["tenant"]:
                tenant = self.set_tenant(session, p)
                if self.c.data_dir is not None:
                    stored = await asyncio.to_thread(self.query_sets().listed, tenant)
                datasets = self.c.datasets.names_for(tenant) if self.c.datasets is not None else []
            who = session.principal
            mine = [q for q in stored if self.is_admin(who) or q.get("uploaded_by") == who.user_id]
            return self.render(req, "compare.html", session=session, form=form, result=result, stored=stored,
                               deletable=mine, datasets=datasets)
        return await self.page(request, run)

    async def compare_set(self, request: Request) -> Response:
        form = await self.read_form(request, MAX_QUERY_SET_BYTES + MULTIPART_OVERHEAD)
        if form is None:
            session = self.session_of(request)
            return self.error(request, 413, f"the upload is larger than {MAX_QUERY_SET_BYTES} bytes", session)
        request.state.form = form

        async def run(req: Request, session: Session) -> Response:
            upload = form.get("query_set")
            if upload is None or isinstance(upload, str):
                raise InvalidArgument("query_set", "choose a JSONL file to upload")
            raw = await upload.read()
            queries = parse_query_set(raw)
            if form.get("store"):
                await asyncio.to_thread(self.query_sets().save, self.set_tenant(session, form),
                                        str(upload.filename or ""), raw, session.principal.user_id)
            return await self.evaluate_set(req, session, form, queries)
        return await self.page(request, run, post=True)

    async def stored_set(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            form = req.state.form
            _, queries = await asyncio.to_thread(self.query_sets().load, self.set_tenant(session, form),
                                                 str(form.get("set", "")))
            return await self.evaluate_set(req, session, form, queries)
        return await self.form_page(request, run)

    async def evaluate_set(self, req: Request, session: Session, form: Any, queries: list) -> Response:
        """A set of at most INLINE_QUERIES while the request waits; a longer one (or with
        `background`) as a run of the caller's, whose page shows its progress."""
        self.rate(session)
        fields = {"a": str(form.get("a", "")).strip(), "b": str(form.get("b", "")).strip(),
                  "tenant": str(form.get("tenant", ""))}

        def work(progress: Callable[[int], None] | None = None) -> Awaitable[dict[str, Any]]:
            return views.evaluate(self.c.pipeline, session.principal, queries, profile_a=fields["a"],
                                  profile_b=fields["b"], tenant=self.tenant(session, form), progress=progress)

        if len(queries) > INLINE_QUERIES or form.get("background"):
            started = self.c.runs.start(_owner(session), len(queries), fields, work)
            return RedirectResponse(f"/console/compare/runs/{started.run_id}", status_code=303)
        return self.render(req, "compare_set.html", session=session, form=fields, result=await work())

    async def set_run(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            shown = self.c.runs.get(_owner(session), str(req.path_params.get("run_id", "")))
            if shown.status == "failed":
                raise InvalidArgument("query_set", f"the evaluation failed: {shown.error}")
            return self.render(req, "compare_set.html", session=session, form=shown.form, result=shown.result,
                               running=shown)
        return await self.page(request, run)

    @staticmethod
    def is_admin(principal: Principal | None) -> bool:
        return _is_admin(principal)

    def query_sets(self) -> QuerySets:
        if self.c.data_dir is None:
            raise Unavailable("this RAGPipeline keeps no query sets (no data directory)")
        return QuerySets(self.c.data_dir)

    def set_tenant(self, session: Session, params: Any) -> str:
        """The verified tenant whose stored query sets a caller uses."""
        tenant = self.c.pipeline.tenant_for(self.tenant(session, params), session.principal)
        if not tenant:
            raise InvalidArgument("tenant", "name the tenant whose query sets to use")
        return tenant

    async def profiles(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            tenant = self.tenant(session, req.query_params) or session.principal.tenant_id
            listed = await views.profiles(self.c.pipeline, tenant) if tenant else []
            return self.render(req, "profiles.html", session=session, profiles=listed, tenant=tenant,
                               fusions=FUSIONS)
        return await self.page(request, run, admin=True)

    async def put_profile(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            form = req.state.form
            tenant = self.tenant(session, form) or session.principal.tenant_id
            fusion = str(form.get("fusion", ""))
            if fusion not in FUSIONS:
                raise InvalidArgument("fusion", f"must be one of {', '.join(f for f in FUSIONS if f)} or empty")
            weights = tuple(_weight(form, f) for f in ("relevancy", "recency", "richness", "reputation"))
            stored = await views.put_profile(self.c.pipeline, session.principal, tenant=tenant,
                                             name=str(form.get("name", "")).strip(), weights=weights, fusion=fusion)
            listed = await views.profiles(self.c.pipeline, tenant)
            return self.render(req, "profiles.html", session=session, profiles=listed, tenant=tenant,
                               fusions=FUSIONS, stored=stored)
        return await self.form_page(request, run, admin=True)

    async def tenant_page(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            tenant = self.tenant(session, req.query_params) or session.principal.tenant_id
            shown = await views.tenant(self.c.pipeline, session.principal, tenant, self.c.data_dir) if tenant else None
            return self.render(req, "tenant.html", session=session, tenant=tenant, shown=shown)
        return await self.page(request, run, admin=True)

    async def topics(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            if self.c.topics is None:
                raise Unavailable("this RAGPipeline serves no topics")
            p = req.query_params
            tenant = self.tenant(session, p)
            topic = _topic_id(p.get("topic", ""))
            shown = None
            if tenant or not _needs_tenant(session.principal):
                shown = await topic_map(self.c.topics, session.principal, tenant, topic)
            return self.render(req, "topics.html", session=session, tenant=tenant or session.principal.tenant_id,
                               shown=shown, form={"tenant": tenant})
        return await self.page(request, run)

    async def traces(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            listed = await traces.search_traces(self.c.trace_dir)
            return self.render(req, "traces.html", session=session, listed=listed, files=self.c.trace_dir is not None)
        return await self.page(request, run, operator=True)

    async def trace(self, request: Request) -> Response:
        async def run(req: Request, session: Session) -> Response:
            shown = await traces.one_trace(self.c.trace_dir, str(req.path_params.get("trace_id", "")))
            return self.render(req, "trace.html", session=session, trace=shown)
        return await self.page(request, run, operator=True)


def _owner(session: Session) -> tuple[str, str]:
    return session.principal.tenant_id, session.principal.user_id


def _is_admin(principal: Principal | None) -> bool:
    return principal is not None and (principal.has_role(ADMIN) or principal.has_role(OPERATOR))


def _needs_tenant(principal: Principal | None) -> bool:
    return principal is not None and principal.has_role(OPERATOR) and not principal.tenant_id


def _top_k(raw: str) -> int:
    try:
        k = int(raw)
    except ValueError:
        raise InvalidArgument("k", f"must be a whole number from 1 to {views.MAX_TOP_K}") from None
    if not 1 <= k <= views.MAX_TOP_K:
        raise InvalidArgument("k", f"must be a whole number from 1 to {views.MAX_TOP_K}")
    return k


def _topic_id(raw: str) -> int | None:
    if not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument("topic", "must be a topic id (a whole number) from the topic table") from None


def _weight(form: FormData, name: str) -> float:
    try:
        value = float(str(form.get(name, "")))
    except ValueError:
        raise InvalidArgument(name, "must be a number from 0 to 1") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(name, "must be a number from 0 to 1")
    return value


def console_routes(console: Console) -> list[Any]:
    """The routes to add to the RAGPipeline's HTTP app: `/console` and everything under it."""
    app = ConsoleApp(console)
    inner = Starlette(routes=[
        Route("/", app.root, methods=["GET"]),
        Route("/login", app.login_form, methods=["GET"]),
        Route("/login", app.login, methods=["POST"]),
        Route("/logout", app.logout, methods=["POST"]),
        Route("/search", app.search, methods=["GET"]),
        Route("/compare", app.compare, methods=["GET"]),
        Route("/compare/set", app.compare_set, methods=["POST"]),
        Route("/compare/stored", app.stored_set, methods=["POST"]),
        Route("/compare/runs/{run_id}", app.set_run, methods=["GET"]),
        Route("/admin/profiles", app.profiles, methods=["GET"]),
        Route("/admin/profiles", app.put_profile, methods=["POST"]),
        Route("/admin/tenant", app.tenant_page, methods=["GET"]),
        *admin_routes(app),
        *compare_routes(app),
        Route("/topics", app.topics, methods=["GET"]),
        Route("/traces", app.traces, methods=["GET"]),
        Route("/traces/{trace_id}", app.trace, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ], middleware=[Middleware(SecurityHeaders)])
    inner.router.redirect_slashes = False

    async def bare(request: Request) -> Response:
        return RedirectResponse("/console/", status_code=307, headers=HEADERS)

    return [Route("/console", bare, methods=["GET"]), Mount("/console", app=inner)]


__all__ = ["Console", "console_routes"]
