"""Family (g): the web console (`/console` on the RAGPipeline's HTTP port), attacked over plain HTTP
as a browser on the same host, or a page it visits, could (docs/CONSOLE.md has the model).

    controls          a legit login (API key, JWT, admin JWT) gets a session; a legit search shows results
    cookie            the session cookie is HttpOnly, SameSite=Strict, Path=/console
    fixation          a cookie planted before login (made up, or the attacker's own live session) is
                      not the one after login, and is not authenticated afterwards
    CSRF              logout, the query-set upload, the admin profile form and login itself, without
                      the token, with a wrong one, with another session's: 403 and nothing changed
                      (the session lives, no profile stored: the core's listing over MCP says so);
                      a foreign Origin with the right token is refused too
    stored XSS        a document whose title and text carry <script>, "><img onerror=...> and
                      javascript: URLs, and the same payloads reflected through the URL, the query
                      set and a profile name: escaped text on every page, never markup; a strict CSP
                      on every console response
    cross-tenant      acme's users and admin naming globex (tenant, profile, persona, user fields in
                      URLs and forms): ignored or refused, globex's canary never shown, globex's
                      profiles neither listed nor written
    roles             a user gets 403 on the admin page and its POST (with its own valid CSRF token);
                      role, tenant and user fields forged into the login form, and a JWT claiming
                      the operator role, give no admin
    login             unknown, disabled, expired, wrong-audience, foreign-key and `alg: none`
                      credentials, the trusted platform's key and a service's token: refused, no
                      session; more than the limit of attempts from one address: 429, even for the
                      right credential, while another address still logs in
    logout            the old cookie is dead afterwards (redirect to login, 403 on a POST)
    admin pages       the profile editor, sources, registries, tenant page and topic map: roles, CSRF,
                      cross-tenant fields and stored XSS (benchmarks/attacks/console_admin.py)

Every client has a loopback address of its own (127.x.y.z), so the per-address login limit
(services/rag_pipeline/console/login.py, sessions.LoginLimiter: 10 a minute) hits only the
brute-force client. The hostile document is visible to one group only and deleted at the end.
"""
from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import secrets
import time
from urllib.parse import urlsplit

import httpx

from benchmarks.attacks.console_admin import admin_pages
from benchmarks.attacks.tally import Family
from benchmarks.attacks.wire import Forge, McpHttp
from benchmarks.secure_stack import AUDIENCE, GLOBEX_CANARY, ISSUER, RETIRED, SecureStack
from shared.records import ArtifactMeta, DocumentIn

COOKIE = "nucleus_console"
LOGIN_LIMIT = 10                      # attempts a minute per client address (docs/CONSOLE.md)
XSS_GROUP = "console-attack-xss"
XSS_ID = "console-attack-xss"
XSS_TITLE = 'Okapi narwhal memo <script>window.__pwn=1</script>"><img src=x onerror=alert(1)>'
XSS_BODY = ('# Okapi narwhal memo\n\nThe okapi narwhal memo <script>alert(2)</script> "><img src=x '
            'onerror=alert(3)> <a href="javascript:alert(4)">click</a> javascript:alert(5) explains the rules.')
XSS_QUERY = 'okapi narwhal memo "><img src=x onerror=alert(6)><script>alert(7)</script>'
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')
OWN_SCRIPT = '<script src="/console/static/topics.js" defer></script>'       # the Topics page's, shipped


def _markup(html: str) -> list[str]:
    """Injected markup in a console page (the console itself has no script but its own static file,
    no img or javascript: URL)."""
    html = html.replace(OWN_SCRIPT, "")
    return [m for m in ("<script", "<img", "href=\"javascript:", "src=\"javascript:") if m in html]


def _alg_none(claims: dict) -> str:
    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}."


def _csp_strict(value: str) -> bool:
    rules = {d.split()[0]: d.split()[1:] for d in (p.strip() for p in value.split(";")) if d}
    script = rules.get("script-src", rules.get("default-src", []))
    return (rules.get("default-src") == ["'self'"] and bool(script)
            and not any(s in script for s in ("'unsafe-inline'", "'unsafe-eval'", "*", "data:"))
            and rules.get("object-src") == ["'none'"] and rules.get("frame-ancestors") == ["'none'"]
            and rules.get("base-uri") in (["'none'"], ["'self'"]))


class Probe:
    """The family's HTTP clients and their calls: every request counts in the next check."""

    def __init__(self, fam: Family, stack: SecureStack) -> None:
        self.fam, self.stack = fam, stack
        self.base = stack.base_url
        self.calls = 0
        self._counted = 0
        self.responses: list[httpx.Response] = []
        self._loopback = (urlsplit(self.base).hostname or "").startswith("127.")
        self._used: set[str] = set()
        self.clients: list[Browser] = []

    def address(self) -> str | None:
        if not self._loopback:
            return None
        while True:
            addr = f"127.{random.randint(64, 250)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
            if addr not in self._used:
                self._used.add(addr)
                return addr

    def browser(self) -> Browser:
        b = Browser(self)
        self.clients.append(b)
        return b

    def check(self, name: str, ok: bool, observed: str, refused: int = 0) -> bool:
        calls, self._counted = self.calls - self._counted, self.calls
        return self.fam.check(name, ok, observed, calls=calls, refused=refused if ok else 0)

    def leak_free(self, name: str, body: str, refused: int = 0) -> bool:
        """A check that `body` holds nothing of globex's (a canary in it is a leak, not a miss)."""
        calls, self._counted = self.calls - self._counted, self.calls
        if GLOBEX_CANARY in body or 'data-artifact="globex-travel"' in body:
            self.fam.record("leak", name, body[max(0, body.find(GLOBEX_CANARY) - 80):][:200])
            for _ in range(calls - 1):
                self.fam.record("served")
            return False
        return self.fam.check(name, True, "nothing of globex's", calls=calls, refused=refused)

    def skip(self) -> None:
        """The calls since the last check are counted by whoever records the outcome (a crash)."""
        self._counted = self.calls

    def profiles(self, who: str) -> set[str]:
        """The names of the ranking profiles of `who`'s tenant, from the core over MCP."""
        with McpHttp(self.stack.mcp_url, self.stack.headers(who)) as s:
            s.initialize()
            answer = s.tool("list_ranking_profiles", {})
        self.calls += 2
        if answer.structured is None:
            raise RuntimeError(f"list_ranking_profiles as {who}: {answer.describe()}")
        return {p["name"] for p in answer.structured.get("profiles", [])}

    def stores_profile(self, name: str, browser: Browser, path: str, form: dict[str, str], profile: str,
                       who: str) -> bool:
        """A control: posting `form` to `path` answers 200, and `who`'s tenant then holds `profile`."""
        r = browser.post(path, form)
        return self.check(name, r.status_code == 200 and profile in self.profiles(who), f"HTTP {r.status_code}")

    def close(self) -> None:
        for b in self.clients:
            b.http.close()


class Browser:
    """A cookie jar and its own loopback source address."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        address = probe.address()
        transport = httpx.HTTPTransport(local_address=address) if address else None
        self.http = httpx.Client(base_url=probe.base, transport=transport, follow_redirects=False, timeout=60)

    def send(self, method: str, path: str, **kw) -> httpx.Response:
        response = self.http.request(method, f"/console{path}", **kw)
        self.probe.calls += 1
        self.probe.responses.append(response)
        return response

    def get(self, path: str, **params) -> httpx.Response:
        return self.send("GET", path, params=params or None)

    def post(self, path: str, data: dict, **kw) -> httpx.Response:
        return self.send("POST", path, data=data, **kw)

    @property
    def session(self) -> str | None:
        return self.http.cookies.get(COOKIE, path="/console")

    def set_session(self, value: str) -> None:
        self.http.cookies.set(COOKIE, value, domain=urlsplit(self.probe.base).hostname or "", path="/console")

    def login_token(self) -> str:
        match = CSRF_FIELD.search(self.get("/login").text)
        return match.group(1) if match else ""

    def login(self, credential: str, **extra: str) -> httpx.Response:
        return self.post("/login", {"csrf": self.login_token(), "credential": credential, **extra})

    def csrf(self) -> str:
        match = CSRF_FIELD.search(self.get("/search").text)
        return match.group(1) if match else ""

    def alive(self) -> bool:
        return self.get("/search").status_code == 200


def _logged_in(r: httpx.Response) -> bool:
    return r.status_code == 303 and r.headers.get("location") == "/console/search"


def _profile_form(name: str, csrf: str | None, **extra: str) -> dict[str, str]:
    form = {"name": name, "relevancy": "0.7", "recency": "0.1", "richness": "0.1", "reputation": "0.1",
            "fusion": "", **extra}
    if csrf is not None:
        form["csrf"] = csrf
    return form


def _query_set() -> dict:
    return {"query_set": ("set.jsonl", b'{"query": "pallas battery", "relevant": ["pallas-battery-guide-2026"]}\n',
                          "application/jsonl")}


def hostile_document() -> DocumentIn:
    now = int(time.time())
    return DocumentIn(artifact=ArtifactMeta(
        artifact_id=XSS_ID, title=XSS_TITLE, source_type="policy", source_id="console-attack",
        source_uri="javascript:alert(8)", file_name="xss.md", file_type="md", created_unix=now - 60,
        modified_unix=now - 60, visibility_groups=(XSS_GROUP,)), content=XSS_BODY, content_type="text/markdown")


async def _knowledge_store(stack: SecureStack, what: str) -> None:
    from services.knowledge_store.client import KnowledgeStoreClient

    client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                  interceptors=stack.operator("knowledge_store"))
    try:
        if what == "ingest":
            await client.ingest("acme", "", [hostile_document()])
        else:
            await client.delete("acme", [XSS_ID])
    finally:
        await client.close()


# ---------------------------------------------------------------------------- sections
def controls(p: Probe, creds: dict[str, str]) -> None:
    b = p.browser()
    r = b.login(creds["user"])
    p.check("control: a legit login (JWT) gets a session", _logged_in(r) and bool(b.session),
            f"HTTP {r.status_code} -> {r.headers.get('location')}")
    r = b.get("/search", q="how do I reset the Pallas battery controller", k="5")
    n = r.text.count('class="result')
    p.check("control: a legit search shows results", r.status_code == 200 and n > 0,
            f"HTTP {r.status_code}, {n} results")
    a = p.browser()
    r = a.login(p.stack.keys["alice"])
    ok = _logged_in(r) and "alice @ acme" in a.get("/search").text
    p.check("control: a legit login (API key) is its user", ok, f"HTTP {r.status_code}")
    admin = p.browser()
    login = admin.login(creds["admin"])
    r = admin.get("/admin/profiles")
    p.check("control: the admin JWT reaches the admin page", r.status_code == 200, f"HTTP {r.status_code}")
    raw = next((v for v in login.headers.get_list("set-cookie") if v.startswith(COOKIE + "=")), "")
    flags = {f.strip().lower() for f in raw.split(";")[1:]}
    ok = {"httponly", "samesite=strict", "path=/console"} <= flags
    p.check("the session cookie is HttpOnly, SameSite=Strict, Path=/console", ok, raw.split(";", 1)[-1].strip(),
            refused=0)


def fixation(p: Probe, creds: dict[str, str]) -> None:
    planted = secrets.token_urlsafe(32)
    victim = p.browser()
    victim.set_session(planted)
    r = victim.login(creds["user"])
    after = victim.session
    ok = _logged_in(r) and after is not None and after != planted
    p.check("a made-up cookie planted before login is replaced at login", ok, f"new id: {after != planted}")
    attacker = p.browser()
    attacker.set_session(planted)
    r = attacker.get("/search")
    ok = r.status_code == 303 and r.headers.get("location") == "/console/login"
    p.check("the planted id is not authenticated after the victim's login", ok, f"HTTP {r.status_code}",
            refused=int(ok))

    attacker = p.browser()
    attacker.login(p.stack.keys["alice"])
    own = attacker.session or ""
    victim = p.browser()
    victim.set_session(own)
    r = victim.get("/login")
    ok = r.status_code == 303 and "csrf" not in r.text
    p.check("a browser carrying a live session gets no login form (nothing to fixate)", ok, f"HTTP {r.status_code}")
    victim = p.browser()
    form_token = victim.login_token()         # the form loaded, then the attacker's cookie planted
    victim.set_session(own)
    r = victim.post("/login", {"csrf": form_token, "credential": p.stack.keys["sec"]})
    new = victim.session
    ok = _logged_in(r) and new not in (None, own) and "sec @ acme" in victim.get("/search").text
    p.check("the attacker's live session planted in a browser is not the victim's after login", ok,
            f"new id: {new != own}")
    r = attacker.get("/search")
    ok = r.status_code == 303 and "sec @ acme" not in r.text
    p.check("the planted live session is revoked by the victim's login (not upgraded to sec)", ok,
            f"HTTP {r.status_code}", refused=int(ok))


def csrf(p: Probe, creds: dict[str, str]) -> None:
    admin, other = p.browser(), p.browser()
    admin.login(creds["admin"])
    other.login(creds["user"])
    token, foreign = admin.csrf(), other.csrf()
    bad = {"missing": None, "wrong": secrets.token_urlsafe(32), "another session's": foreign, "empty": ""}
    for label, value in bad.items():
        form = {} if value is None else {"csrf": value}
        r = admin.post("/logout", form)
        ok = r.status_code == 403 and admin.alive()
        p.check(f"logout with a {label} CSRF token: 403, the session lives", ok, f"HTTP {r.status_code}",
                refused=1)
    for label, value in bad.items():
        form = {"a": "", "b": ""} if value is None else {"csrf": value, "a": "", "b": ""}
        r = admin.post("/compare/set", form, files=_query_set())
        p.check(f"query-set upload with a {label} CSRF token: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
    r = admin.post("/compare/set", {"csrf": token, "a": "", "b": ""}, files=_query_set())
    p.check("control: the query-set upload with the session's token is served", r.status_code == 200 and
            'id="wins"' in r.text, f"HTTP {r.status_code}")
    names = {label: f"attack-csrf-{secrets.token_hex(4)}" for label in bad}
    for label, value in bad.items():
        r = admin.post("/admin/profiles", _profile_form(names[label], value))
        p.check(f"admin profile form with a {label} CSRF token: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
    origin = f"attack-origin-{secrets.token_hex(4)}"
    r = admin.post("/admin/profiles", _profile_form(origin, token), headers={"Origin": "https://evil.example"})
    p.check("admin profile form from a foreign Origin (right token): refused", r.status_code in (403, 421),
            f"HTTP {r.status_code}", refused=1)
    stored = p.profiles("alice")
    listed = admin.get("/admin/profiles").text
    sneaked = sorted(n for n in [*names.values(), origin] if n in stored or n in listed)
    p.check("none of the refused profile forms stored a profile (core listing over MCP, admin page)", not sneaked,
            f"stored: {sneaked}")
    good = f"attack-csrf-ok-{secrets.token_hex(4)}"
    p.stores_profile("control: the profile form with the session's token stores the profile", admin,
                     "/admin/profiles", _profile_form(good, token), good, "alice")

    def no_session(r: httpx.Response) -> bool:
        return r.status_code == 403 and not any(c.startswith(COOKIE + "=") for c in r.headers.get_list("set-cookie"))

    key = p.stack.keys["alice"]
    b = p.browser()
    r = b.post("/login", {"credential": key})
    p.check("login without the login CSRF token (no cookie, no field): 403, no session", no_session(r),
            f"HTTP {r.status_code}", refused=1)
    b = p.browser()
    b.login_token()
    r = b.post("/login", {"credential": key, "csrf": secrets.token_urlsafe(32)})
    p.check("login with a wrong login CSRF token: 403, no session", no_session(r), f"HTTP {r.status_code}", refused=1)
    b, c = p.browser(), p.browser()
    b.login_token()
    r = b.post("/login", {"credential": key, "csrf": c.login_token()})
    p.check("login with another browser's login CSRF token: 403, no session", no_session(r), f"HTTP {r.status_code}",
            refused=1)
    b = p.browser()
    b.login_token()
    r = b.post("/login", {"credential": key, "csrf": token})
    p.check("login with a session's CSRF token: 403, no session", no_session(r), f"HTTP {r.status_code}", refused=1)
    b = p.browser()
    r = b.post("/login", {"credential": key, "csrf": "x"}, headers={"Origin": "https://evil.example"})
    p.check("login posted from a foreign Origin: refused", r.status_code in (403, 421), f"HTTP {r.status_code}",
            refused=1)


def xss(p: Probe, creds: dict[str, str]) -> None:
    viewer = p.browser()
    viewer.login(creds["xss"])
    pages = {
        "search": viewer.get("/search", q="okapi narwhal memo", k="5"),
        "search, payload in the URL": viewer.get("/search", q=XSS_QUERY, k="5", profile='"><script>alert(9)</script>'),
        "compare": viewer.get("/compare", q="okapi narwhal memo", k="5", a="", b=""),
        "compare, payload in the URL": viewer.get("/compare", q=XSS_QUERY, a='"><img src=x onerror=alert(10)>', b=""),
    }
    found = pages["search"].text.count(f'data-artifact="{XSS_ID}"')
    p.check("control: the hostile document is found by its viewer", found > 0, f"{found} results")
    token = viewer.csrf()
    upload = {"query_set": ("x.jsonl", ('{"query": "%s", "relevant": ["%s"]}\n' % (
        XSS_QUERY.replace('"', '\\"'), XSS_ID)).encode(), "application/jsonl")}
    pages["query set, payload in the queries"] = viewer.post(
        "/compare/set", {"csrf": token, "a": "<script>alert(11)</script>", "b": ""}, files=upload)
    admin = p.browser()
    admin.login(creds["admin"])
    name = '"><script>alert(12)</script>'
    pages["admin profile named with the payload"] = admin.post("/admin/profiles", _profile_form(name, admin.csrf()))
    pages["admin page listing it"] = admin.get("/admin/profiles")
    for label, r in pages.items():
        html = r.text
        injected = _markup(html)
        escaped = "&lt;script&gt;" in html or "&lt;img" in html
        ok = not injected and (escaped or r.status_code >= 400 or label == "admin page listing it")
        p.check(f"{label}: payloads escaped, no markup", ok,
                f"HTTP {r.status_code}, raw {injected or 'none'}, escaped text {'present' if escaped else 'absent'}")
    title = pages["search"].text
    ok = ("Okapi narwhal memo &lt;script&gt;window.__pwn=1&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"
          in title)
    p.check("the hostile title shows as its escaped text", ok, "escaped title present" if ok else title[:200])


def cross_tenant(p: Probe, creds: dict[str, str]) -> None:
    g = p.browser()
    g.login(creds["globex_admin"])
    secret = f"globex-secret-{secrets.token_hex(4)}"
    p.stores_profile("control: globex's admin stores a globex profile", g, "/admin/profiles",
                     _profile_form(secret, g.csrf()), secret, "gina")
    gina = p.browser()
    gina.login(p.stack.keys["gina"])
    r = gina.get("/search", q="Globex travel hotel expense limits", k="5")
    ok = 'data-artifact="globex-travel"' in r.text
    p.check("control: gina finds globex's travel policy in the console", ok, f"HTTP {r.status_code}")

    alice = p.browser()
    alice.login(p.stack.keys["alice"])
    q = "Globex travel hotel expense limits"
    for label, params in (
            ("tenant", {"tenant": "globex"}), ("tenant_id", {"tenant_id": "globex"}),
            ("profile", {"profile": secret, "tenant": "globex"}), ("persona", {"persona": "globex", "persona_id": "g"}),
            ("user", {"user": "gina", "user_id": "gina", "x-user-id": "gina"})):
        r = alice.get("/search", q=q, k="10", **params)
        p.leak_free(f"acme's user searching with {label} naming globex", r.text, refused=int(r.status_code >= 400))
    r = alice.get("/compare", q=q, a=secret, b="", tenant="globex")
    p.leak_free("acme's user comparing under globex's profile name", r.text, refused=int(r.status_code >= 400))
    upload = {"query_set": ("g.jsonl", f'{{"query": "{q}", "relevant": ["globex-travel"]}}\n'.encode(), "text/plain")}
    r = alice.post("/compare/set", {"csrf": alice.csrf(), "a": secret, "b": "", "tenant": "globex"}, files=upload)
    p.leak_free("acme's user evaluating a query set with tenant=globex", r.text, refused=int(r.status_code >= 400))
    ok = 'class="win"' not in r.text and (r.status_code >= 400 or "1.000" not in r.text.split('id="deltas"')[-1])
    p.check("the query set scores no hit on globex's document", ok, f"HTTP {r.status_code}")

    admin = p.browser()
    admin.login(creds["admin"])
    r = admin.get("/admin/profiles", tenant="globex")
    ok = r.status_code == 200 and secret not in r.text and "of globex" not in r.text
    p.check("acme's admin page with tenant=globex lists acme's profiles only", ok, f"HTTP {r.status_code}")
    planted = f"acme-into-globex-{secrets.token_hex(4)}"
    r = admin.post("/admin/profiles", _profile_form(planted, admin.csrf(), tenant="globex", tenant_id="globex"))
    globex = p.profiles("gina")
    ok = planted not in globex and secret in globex
    p.check("acme's admin posting the profile form with tenant=globex writes nothing in globex", ok,
            f"HTTP {r.status_code}; in globex: {planted in globex}", refused=int(r.status_code >= 400))
    r = admin.post("/admin/profiles", _profile_form(secret, admin.csrf(), tenant="globex", relevancy="0.0"))
    now = p.profiles("gina")
    p.check("acme's admin reusing globex's profile name does not touch globex's profile", secret in now,
            f"HTTP {r.status_code}", refused=int(r.status_code >= 400))


def roles(p: Probe, creds: dict[str, str]) -> None:
    alice = p.browser()
    alice.login(p.stack.keys["alice"])
    for params in ({}, {"role": "admin", "roles": "admin", "is_admin": "1"}, {"tenant": "acme"}):
        r = alice.get("/admin/profiles", **params)
        p.check(f"a user's GET of the admin page {params or ''}: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
    name = f"attack-role-{secrets.token_hex(4)}"
    r = alice.post("/admin/profiles", _profile_form(name, alice.csrf(), role="admin", roles="admin", is_admin="1"))
    p.check("a user's POST of the profile form with its own valid CSRF token and forged role fields: 403",
            r.status_code == 403, f"HTTP {r.status_code}", refused=1)
    p.check("... and no profile was stored", name not in p.profiles("alice"), "listing over MCP")

    forged = p.browser()
    r = forged.login(p.stack.keys["alice"], roles="admin", role="admin", tenant="globex", user="sec",
                     groups="security-team", is_admin="1")
    page = forged.get("/search").text
    ok = _logged_in(r) and "alice @ acme" in page and "/console/admin/profiles" not in page
    p.check("role, tenant, user and group fields forged into the login form are ignored", ok, f"HTTP {r.status_code}")
    r = forged.get("/admin/profiles")
    p.check("... the forged login still gets 403 on the admin page", r.status_code == 403, f"HTTP {r.status_code}",
            refused=1)
    op = p.browser()
    r = op.login(creds["fake_operator"])
    admin_page = op.get("/admin/profiles") if _logged_in(r) else r
    p.check("a JWT claiming the operator role (tenant acme) gets no admin", admin_page.status_code in (401, 403),
            f"login HTTP {r.status_code}, admin page HTTP {admin_page.status_code}", refused=1)
    r = p.browser().login(creds["tenantless_operator"])
    p.check("a JWT claiming the operator role and no tenant is refused at login", r.status_code == 401,
            f"HTTP {r.status_code}", refused=1)


def logins(p: Probe, creds: dict[str, str]) -> None:
    stack = p.stack
    forge = Forge(stack.identity_dir)
    now = int(time.time())
    refused = {
        "an unknown API key": f"nrk_nobody_{secrets.token_urlsafe(24)}",
        "a disabled API key": stack.keys[RETIRED],
        "an expired JWT": stack.jwt(sub="console-attack", iat=now - 900, exp=now - 60),
        "a JWT for another audience": stack.jwt(sub="console-attack", aud="someone-else"),
        "a JWT signed by a foreign key": stack.jwt(alg="RS256", key=stack.other_rsa_private_pem, sub="console-attack"),
        "an alg:none JWT": _alg_none({"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "tenant": "acme",
                                     "roles": ["admin"], "exp": now + 600}),
        "the trusted platform's key": stack.keys["platform"],
        "a service's token (knowledge_store)": forge.token("knowledge_store", "rag_pipeline"),
        "garbage": "x" * 300,
    }
    for label, credential in refused.items():
        b = p.browser()
        r = b.login(credential)
        ok = r.status_code == 401 and b.session is None
        p.check(f"login with {label}: refused, no session", ok, f"HTTP {r.status_code}", refused=1)

    brute = p.browser()
    statuses = [brute.login(f"nrk_alice_{secrets.token_urlsafe(24)}").status_code for _ in range(LOGIN_LIMIT)]
    p.check(f"{LOGIN_LIMIT} wrong logins from one address: each refused 401", statuses == [401] * LOGIN_LIMIT,
            f"{statuses}", refused=LOGIN_LIMIT)
    over = [brute.login(f"nrk_alice_{secrets.token_urlsafe(24)}").status_code for _ in range(3)]
    p.check("wrong logins beyond the limit: 429", over == [429] * 3, f"{over}", refused=3)
    r = brute.login(stack.keys["alice"])
    ok = r.status_code == 429 and brute.session is None
    p.check("the right credential during the lockout: 429, no session", ok, f"HTTP {r.status_code}", refused=1)
    r = p.browser().login(stack.keys["alice"])
    p.check("control: another address logs in meanwhile (the limit is the address's)", _logged_in(r),
            f"HTTP {r.status_code}")


def logout(p: Probe, creds: dict[str, str]) -> None:
    b = p.browser()
    b.login(creds["user"])
    old, token = b.session or "", b.csrf()
    r = b.post("/logout", {"csrf": token})
    ok = r.status_code == 303 and r.headers.get("location") == "/console/login"
    p.check("control: logout with the session's token", ok, f"HTTP {r.status_code}")
    replay = p.browser()
    replay.set_session(old)
    r = replay.get("/search", q="pallas battery")
    ok = r.status_code == 303 and r.headers.get("location") == "/console/login"
    p.check("the old cookie after logout: redirected to login", ok, f"HTTP {r.status_code}", refused=1)
    r = replay.post("/compare/set", {"csrf": token, "a": "", "b": ""}, files=_query_set())
    p.check("the old cookie and token after logout: POST refused 403", r.status_code == 403, f"HTTP {r.status_code}",
            refused=1)
    r = replay.get("/admin/profiles")
    p.check("the old cookie after logout: no admin page", r.status_code in (303, 401, 403), f"HTTP {r.status_code}",
            refused=1)


def _guard_refusal(r: httpx.Response) -> bool:
    """A refusal of the Host/Origin guard (shared/http_guard.py), in front of the console's own headers."""
    return r.status_code in (403, 421) and r.headers.get("content-type", "").startswith("text/plain") and \
        r.text.strip().startswith("Invalid ")


def headers(p: Probe) -> None:
    p.browser().send("GET", "/static/console.css")
    guard = [r for r in p.responses if _guard_refusal(r)]
    console = [r for r in p.responses if not _guard_refusal(r)]
    bad = [f"{r.request.method} {r.request.url.path} -> {r.status_code}" for r in console
           if not _csp_strict(r.headers.get("content-security-policy", ""))
           or r.headers.get("x-content-type-options") != "nosniff" or r.headers.get("x-frame-options") != "DENY"]
    p.check(f"a strict CSP, nosniff and X-Frame-Options DENY on every console response ({len(console)})",
            not bad, "; ".join(bad[:5]) or "all present")
    echoed = [r.text[:80] for r in guard if "evil.example" in r.text or "<" in r.text]
    p.check(f"the Host/Origin guard's refusals ({len(guard)}) are fixed plain text, echoing nothing", not echoed,
            "; ".join(echoed) or "text/plain, fixed text (no console headers: the guard answers first)", refused=0)


def credentials(stack: SecureStack) -> dict[str, str]:
    tag = secrets.token_hex(3)
    return {"user": stack.jwt(sub=f"console-attack-user-{tag}"),
            "admin": stack.jwt(sub=f"console-attack-admin-{tag}", roles=["admin"]),
            "xss": stack.jwt(sub=f"console-attack-xss-{tag}", groups=[XSS_GROUP]),
            "globex_admin": stack.jwt(sub=f"console-attack-globex-{tag}", tenant="globex", roles=["admin"]),
            "fake_operator": stack.jwt(sub=f"console-attack-op-{tag}", roles=["operator"]),
            "tenantless_operator": stack.jwt(sub=f"console-attack-op-{tag}", tenant="", roles=["operator"])}


def run(fam: Family, stack: SecureStack) -> None:
    probe = Probe(fam, stack)
    creds = credentials(stack)
    try:
        asyncio.run(_knowledge_store(stack, "ingest"))
        for section, step in (("controls", controls), ("session fixation", fixation), ("CSRF", csrf),
                              ("stored XSS", xss), ("cross-tenant", cross_tenant), ("role escalation", roles),
                              ("admin pages", lambda p, c: admin_pages(p, c, _markup, XSS_ID)),
                              ("login", logins), ("logout", logout), ("headers", lambda p, c: headers(p))):
            fam.section = section
            try:
                step(probe, creds)
            except Exception as err:  # noqa: BLE001 - one broken section must not hide the others
                probe.skip()
                fam.record("error", f"{section} crashed", repr(err)[:300])
    finally:
        probe.close()
        asyncio.run(_knowledge_store(stack, "delete"))


__all__ = ["run"]
