"""Family (g), the console's admin pages and the topic map (benchmarks/attacks/console.py runs it as
the section "admin pages"):

    roles         a user gets 403 on the profile editor, the sources, the registries and the tenant
                  page, and on every POST of theirs with its own valid CSRF token (nothing stored or
                  changed); a tenant admin gets 403 on the operator's registries and their import
    CSRF          the profile editor and the source actions without the token, with a wrong one,
                  with another session's: 403, nothing stored or changed
    cross-tenant  acme's admin naming globex (tenant, tenant_id fields in URLs and forms): the
                  editor opens no globex profile and saves none into globex; globex's source cannot
                  be enabled or disabled by acme's admin (answered as an unknown id); the tenant
                  page shows acme's folder runs only, never globex's; the topic map of acme's
                  users (and with tenant=globex in the URL) holds nothing of globex's
    stored XSS    the topic map and a topic's members show the hostile title as escaped text
    query sets    globex's stored query set and its background run, by id, from acme's user: 404,
                  never listed, nothing of globex's shown
"""
from __future__ import annotations

import secrets
import time
from typing import Any

from cli.folder_ingest import FileOutcome
from services.rag_pipeline.federation.admin import SourcesEditor
from shared.ingest_runs import log_path, record_run

GLOBEX_SOURCE = "attack_globex_src"


def _editor_form(name: str, csrf: str | None, **extra: str) -> dict[str, str]:
    form = {"name": name, "persona_id": "", "relevancy_weight": "0.7", "recency_weight": "0.1",
            "richness_weight": "0.1", "reputation_weight": "0.1", "fusion_method": "rrf", "dense_weight": "0.5",
            "recency_mode": "auto", "recency_half_life_days": "90", "reputation_prior_strength": "4",
            "reranker": "", "rerank_top_n": "20", "rerank_weight": "0.5", **extra}
    if csrf is not None:
        form["csrf"] = csrf
    return form


def _enabled(editor: SourcesEditor, source_id: str) -> bool | None:
    from services.rag_pipeline.federation.sources import load_sources

    return next((s.enabled for s in load_sources(editor.path) if s.id == source_id), None)


def admin_pages(p: Any, creds: dict[str, str], markup: Any, xss_id: str) -> None:
    """The section (module docstring); `markup` finds injected markup in a page, `xss_id` is the
    family's hostile document (visible to `creds["xss"]` only)."""
    stack = p.stack
    data_dir = stack.auth_config.parent
    editor = SourcesEditor(data_dir / "sources.json")
    editor.add(None, {"id": GLOBEX_SOURCE, "url": "https://attack-globex.invalid/mcp", "tenants": ["globex"],
                      "groups": ["nobody-attack"], "enabled": False})
    canary_file = f"globex-runs-canary-{secrets.token_hex(4)}.md"
    runs = log_path(data_dir, "globex")
    before = runs.read_bytes() if runs is not None and runs.exists() else None
    record_run(data_dir, "globex", data_dir, "sync", [FileOutcome(f"/x/{canary_file}", "ingested")], 0.1)
    try:
        _roles(p, creds)
        _csrf(p, creds)
        _cross_tenant(p, creds, editor, canary_file)
        _topics(p, creds, markup, xss_id)
    finally:
        editor.remove(None, GLOBEX_SOURCE)
        if runs is not None:                      # globex's runs as they were
            runs.write_bytes(before) if before is not None else runs.unlink(missing_ok=True)


def _roles(p: Any, creds: dict[str, str]) -> None:
    alice = p.browser()
    alice.login(p.stack.keys["alice"])
    for path in ("/admin/profile", "/admin/sources", "/admin/sources/edit", "/admin/registries", "/admin/tenant"):
        r = alice.get(path, role="admin", tenant="acme", id=GLOBEX_SOURCE)
        p.check(f"a user's GET of {path}: 403", r.status_code == 403, f"HTTP {r.status_code}", refused=1)
    token = alice.csrf()
    name = f"attack-editor-role-{secrets.token_hex(4)}"
    r = alice.post("/admin/profile", _editor_form(name, token, role="admin", roles="admin", is_default="1"))
    ok = r.status_code == 403 and name not in p.profiles("alice")
    p.check("a user's POST of the profile editor (own CSRF token, forged roles): 403, nothing stored", ok,
            f"HTTP {r.status_code}", refused=1)
    for action in ("enable", "disable", "reload", "edit"):
        r = alice.post(f"/admin/sources/{action}", {"csrf": token, "id": GLOBEX_SOURCE, "role": "admin"})
        p.check(f"a user's POST of the source action {action}: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
    r = alice.post("/admin/registries/import", {"csrf": token, "registry": "official", "name": "x", "slug": "x"})
    p.check("a user's POST of the registry import: 403", r.status_code == 403, f"HTTP {r.status_code}", refused=1)
    admin = p.browser()
    admin.login(creds["admin"])
    r = admin.get("/admin/registries")
    p.check("a tenant admin's GET of the operator's registries: 403", r.status_code == 403, f"HTTP {r.status_code}",
            refused=1)
    r = admin.post("/admin/registries/import", {"csrf": admin.csrf(), "registry": "official", "name": "x",
                                                 "slug": "attack_import", "tenants": "globex"})
    p.check("a tenant admin's POST of the registry import (tenants=globex): 403", r.status_code == 403,
            f"HTTP {r.status_code}", refused=1)


def _csrf(p: Any, creds: dict[str, str]) -> None:
    admin, other = p.browser(), p.browser()
    admin.login(creds["admin"])
    other.login(creds["user"])
    bad = {"missing": None, "wrong": secrets.token_urlsafe(32), "another session's": other.csrf()}
    names = []
    for label, value in bad.items():
        name = f"attack-editor-csrf-{secrets.token_hex(4)}"
        names.append(name)
        r = admin.post("/admin/profile", _editor_form(name, value))
        p.check(f"the profile editor with a {label} CSRF token: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
        form = {"id": GLOBEX_SOURCE} if value is None else {"csrf": value, "id": GLOBEX_SOURCE}
        r = admin.post("/admin/sources/reload", form)
        p.check(f"the sources reload with a {label} CSRF token: 403", r.status_code == 403, f"HTTP {r.status_code}",
                refused=1)
    stored = p.profiles("alice")
    sneaked = [n for n in names if n in stored]
    p.check("none of the refused editor forms stored a profile (core listing over MCP)", not sneaked,
            f"stored: {sneaked}")
    good = f"attack-editor-ok-{secrets.token_hex(4)}"
    p.stores_profile("control: the profile editor with the session's token stores the profile", admin,
                     "/admin/profile", _editor_form(good, admin.csrf()), good, "alice")


def _cross_tenant(p: Any, creds: dict[str, str], editor: SourcesEditor, canary_file: str) -> None:
    g = p.browser()
    g.login(creds["globex_admin"])
    secret = f"globex-editor-{secrets.token_hex(4)}"
    p.stores_profile("control: globex's admin stores a globex profile in the editor", g, "/admin/profile",
                     _editor_form(secret, g.csrf()), secret, "gina")
    r = g.get("/admin/sources")
    p.check("control: globex's admin sees globex's source", f'data-source="{GLOBEX_SOURCE}"' in r.text,
            f"HTTP {r.status_code}")

    admin = p.browser()
    admin.login(creds["admin"])
    r = admin.get("/admin/profile", name=secret, tenant="globex", tenant_id="globex")
    ok = r.status_code == 404 and 'id="history"' not in r.text
    p.check("acme's admin opening globex's profile by name (tenant=globex): not found", ok, f"HTTP {r.status_code}",
            refused=int(r.status_code >= 400))
    r = admin.post("/admin/profile", _editor_form(secret, admin.csrf(), tenant="globex", tenant_id="globex",
                                                  relevancy_weight="0.01"))
    g_page = g.get("/admin/profile", name=secret)
    versions = g_page.text.count('class="version"')
    ok = "0.01" not in g_page.text.split('id="history"')[-1] and versions == 1
    p.check("acme's admin saving globex's profile name with tenant=globex leaves globex's profile untouched", ok,
            f"HTTP {r.status_code}; globex versions {versions}")
    r = admin.get("/admin/sources", tenant="globex")
    p.check("acme's admin's sources page (tenant=globex) lists no globex source",
            f'data-source="{GLOBEX_SOURCE}"' not in r.text, f"HTTP {r.status_code}")
    r = admin.post("/admin/sources/enable", {"csrf": admin.csrf(), "id": GLOBEX_SOURCE, "tenant": "globex"})
    ok = r.status_code == 404 and _enabled(editor, GLOBEX_SOURCE) is False
    p.check("acme's admin enabling globex's source: unknown id, still disabled", ok, f"HTTP {r.status_code}",
            refused=int(r.status_code >= 400))
    r = admin.get("/admin/sources/edit", id=GLOBEX_SOURCE, tenant="globex")
    p.check("acme's admin opening globex's source in the editor: not found", r.status_code == 404,
            f"HTTP {r.status_code}", refused=int(r.status_code >= 400))
    r = admin.post("/admin/sources/edit", {"csrf": admin.csrf(), "id": GLOBEX_SOURCE, "tenant": "globex",
                                           "reputation": "0.99", "groups": "everyone"})
    ok = r.status_code == 404 and "0.99" not in editor.path.read_text()
    p.check("acme's admin editing globex's source: unknown id, the file unchanged", ok, f"HTTP {r.status_code}",
            refused=int(r.status_code >= 400))
    r = admin.get("/admin/tenant", tenant="globex")
    ok = r.status_code == 200 and canary_file not in r.text and "Tenant acme" in r.text
    p.check("acme's admin's tenant page (tenant=globex) shows acme's, never globex's folder runs", ok,
            f"HTTP {r.status_code}; globex run shown: {canary_file in r.text}")
    p.leak_free("acme's admin's tenant page", r.text)
    _query_sets(p, g)
    alice = p.browser()
    alice.login(p.stack.keys["alice"])
    for params in ({}, {"tenant": "globex"}, {"tenant_id": "globex", "topic": "0"}):
        r = alice.get("/topics", **params)
        p.leak_free(f"acme's user's topic map {params or ''}", r.text, refused=int(r.status_code >= 400))


def _query_sets(p: Any, g: Any) -> None:
    """globex's stored query set and background run, reached for by acme's users."""
    name = f"globex-set-{secrets.token_hex(4)}.jsonl"
    raw = b'{"query": "Globex travel hotel expense limits", "relevant": ["globex-travel"]}\n'
    r = g.post("/compare/set", {"csrf": g.csrf(), "a": "", "b": "", "store": "1", "background": "1"},
               files={"query_set": (name, raw, "application/jsonl")})
    run_url = r.headers.get("location", "")
    page = g.get("/compare").text
    set_id = page.split(f">{name}", 1)[0].rsplit('value="', 1)[-1].split('"', 1)[0] if name in page else ""
    p.check("control: globex's user stores a query set and starts a background run",
            r.status_code == 303 and "/console/compare/runs/" in run_url and len(set_id) == 16,
            f"HTTP {r.status_code}, set id {set_id!r}")
    alice = p.browser()
    alice.login(p.stack.keys["alice"])
    listed = alice.get("/compare", tenant="globex").text
    p.check("acme's user's Compare page (tenant=globex) lists no globex set", name not in listed, "not listed")
    r = alice.post("/compare/stored", {"csrf": alice.csrf(), "set": set_id or "0" * 16, "a": "", "b": "",
                                       "tenant": "globex", "tenant_id": "globex"})
    p.check("acme's user running globex's stored set by id (tenant=globex): not found", r.status_code == 404,
            f"HTTP {r.status_code}", refused=int(r.status_code >= 400))
    p.leak_free("... and nothing of globex's in the answer", r.text)
    r = alice.get(run_url.removeprefix("/console")) if run_url else alice.get("/compare/runs/x")
    p.check("acme's user opening globex's background run: not found", r.status_code == 404, f"HTTP {r.status_code}",
            refused=int(r.status_code >= 400))
    p.leak_free("... and nothing of globex's in the answer", r.text)
    r = alice.post("/compare/stored/delete", {"csrf": alice.csrf(), "set": set_id or "0" * 16, "tenant": "globex"})
    p.check("acme's user deleting globex's stored set by id (tenant=globex): not found", r.status_code == 404,
            f"HTTP {r.status_code}", refused=int(r.status_code >= 400))
    r2 = g.post("/compare/stored/delete", {"set": set_id or "0" * 16})
    p.check("globex's user deleting its own set without the CSRF token: 403", r2.status_code == 403,
            f"HTTP {r2.status_code}", refused=int(r2.status_code >= 400))
    p.check("... globex's set is still stored after both", name in g.get("/compare").text, "listed")
    r = alice.post("/compare/dataset", {"csrf": alice.csrf(), "dataset": "../../../etc/passwd", "a": "", "b": ""})
    p.check("a server path typed as the dataset of a query set: refused, nothing of the file shown",
            r.status_code in (400, 503) and "root:" not in r.text, f"HTTP {r.status_code}",
            refused=int(r.status_code >= 400))


def _topics(p: Any, creds: dict[str, str], markup: Any, xss_id: str) -> None:
    viewer = p.browser()
    viewer.login(creds["xss"])
    deadline = time.monotonic() + 30
    r = viewer.get("/topics")
    while 'id="topic-map"' not in r.text and time.monotonic() < deadline:     # clusters computed on first use
        time.sleep(1)
        r = viewer.get("/topics")
    shown = f'data-artifact="{xss_id}"' in r.text
    p.check("control: the hostile document is on its viewer's topic map", shown, f"HTTP {r.status_code}")
    # the point's attributes: data-topic="N" data-artifact="..."; its topic's members page lists it
    topic_id = r.text.split(f'data-artifact="{xss_id}"', 1)[0].rsplit('data-topic="', 1)[-1].split('"', 1)[0]
    members = viewer.get("/topics", topic=topic_id if topic_id.isdigit() else "0")
    for label, page in (("topic map", r), ("topic members", members)):
        injected = markup(page.text)
        escaped = "&lt;script&gt;" in page.text
        p.check(f"{label}: the hostile title is escaped text, no markup", not injected and escaped,
                f"HTTP {page.status_code}, raw {injected or 'none'}; topic {topic_id}")


__all__ = ["admin_pages"]
