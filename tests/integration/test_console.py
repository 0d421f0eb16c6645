"""The web console in a real headless Chromium (Debian's `chromium`, driven by Playwright; no
`playwright install`) against the suite's authenticated stack: login for a server-side session,
search with the 4R bars, compare two profiles on a query and on a judged query set, the admin
role, CSRF, escaped titles (no script runs), logout revoked server-side, the operator's Traces
(waterfalls across the services) and the tenant page. Screenshots of every page go to the
test's artifact directory (printed)."""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from rich.console import Console

from cli import ingest as cli_ingest
from services.knowledge_store.client import KnowledgeStoreClient
from services.rag_pipeline.federation.admin import SourcesEditor
from shared.auth.service_identity import ServiceSigner
from shared.documents import iter_paths, load_document
from shared.records import ArtifactMeta, DocumentIn
from tests.integration.secure_stack import DEMO, ingest_corpus

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
GROUP = "console-xss"        # only the console's admin (a JWT naming this group) sees the hostile document
XSS_TITLE = ('Zebra quokka memo <script>window.__xss = 1</script>'
             '<img src=x onerror="window.__xss = 2; alert(1)">')
PROFILE_A, PROFILE_B = "console-relevancy", "console-recency"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


def hostile_document() -> DocumentIn:
    now = int(time.time())
    return DocumentIn(artifact=ArtifactMeta(
        artifact_id="console-xss-memo", title=XSS_TITLE, source_type="policy", source_id="console-test",
        source_uri="https://intranet.acme.example/xss", file_name="xss.md", file_type="md",
        created_unix=now - 60, modified_unix=now - 60, visibility_groups=(GROUP,)),
        content="# Zebra quokka memo\n\nThe zebra quokka memo explains the quokka zebra crossing rules.",
        content_type="text/markdown")


def judged_set() -> bytes:
    """20 queries from the demo corpus: each document's title, its own artifact judged relevant."""
    docs = [load_document(p) for p in iter_paths(DEMO)]
    rows = [{"query": d.artifact.title, "relevant": [d.artifact.artifact_id]}
            for d in docs if d.artifact.title][:20]
    assert len(rows) == 20
    return "\n".join(json.dumps(r) for r in rows).encode()


class Browser:
    """One Chromium for the module, used from one thread (Playwright's sync API is thread-bound)."""

    def __init__(self, shots: Path) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self.shots = shots
        self.sessions: dict[str, dict] = {}          # identity -> the storage state of its session
        self._pw = self._browser = None

    async def run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def start(self) -> None:
        from playwright.sync_api import sync_playwright

        assert CHROMIUM.exists(), "Debian's chromium is missing: apt-get install chromium (scripts/bootstrap.sh)"
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)

    def context(self, state: dict | None = None):
        ctx = self._browser.new_context(viewport={"width": 1280, "height": 900}, storage_state=state)
        ctx.set_default_timeout(20_000)
        return ctx

    def shot(self, page, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def stop(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()


@pytest.fixture(scope="module")
async def console(secure_corpus, tmp_path_factory):
    stack = secure_corpus
    await ingest_corpus(stack, {"acme": [hostile_document()]})
    shots = tmp_path_factory.mktemp("console-screenshots")
    print(f"\nconsole screenshots: {shots}")
    browser = Browser(shots)
    await browser.run(browser.start)
    yield stack, browser
    await browser.run(browser.stop)
    browser.pool.shutdown(wait=True)
    client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                  interceptors=stack.operator("knowledge_store"))
    try:
        await client.delete("acme", [hostile_document().artifact.artifact_id])   # the session stack as it was
    finally:
        await client.close()


def _identity(credential: str) -> str:
    """Who a credential names (a JWT made again for the same person is the same identity)."""
    parts = credential.split(".")
    if len(parts) != 3:
        return credential
    claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    return json.dumps({k: claims.get(k) for k in ("sub", "tenant", "roles", "groups")}, sort_keys=True)


def login(browser: Browser, base: str, credential: str, shot: str | None = None, *, fresh: bool = False):
    """A logged-in browser context. Each identity logs in once per module and its later contexts
    reuse that session's cookie: all the browser's logins come from 127.0.0.1, which the console
    allows 10 login attempts a minute."""
    key = _identity(credential)
    if not fresh and key in browser.sessions:
        ctx = browser.context(browser.sessions[key])
        page = ctx.new_page()
        page.goto(f"{base}/console/search")
        assert page.url.endswith("/console/search"), page.url
        return ctx, page
    ctx = browser.context()
    page = ctx.new_page()
    page.goto(f"{base}/console/login")
    if shot:
        browser.shot(page, shot)
    page.fill("#credential", credential)
    with page.expect_navigation():
        page.click("#login")
    assert page.url.endswith("/console/search"), (page.url, page.content()[:2000])
    if not fresh:
        browser.sessions[key] = ctx.storage_state()
    return ctx, page


def watch_dialogs(page) -> list[str]:
    """The messages of every dialog (alert, confirm) the page opens from now on, each dismissed."""
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    return dialogs


def assert_no_script_ran(page, dialogs: list[str]) -> None:
    """XSS_TITLE's script and its onerror image did nothing: no global set, no image, no dialog."""
    page.wait_for_load_state("load")
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("main img").count() == 0 and dialogs == []


async def test_admin_logs_in_stores_profiles_and_reads_the_4r_bars(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])

    def scenario():
        ctx, page = login(browser, base, admin, shot="01-login")
        assert "carol-admin" in page.inner_text("#who")
        response = page.goto(f"{base}/console/admin/profiles")
        assert response.status == 200 and response.headers["content-security-policy"] == CSP
        for name, weights in ((PROFILE_A, (0.85, 0.05, 0.05, 0.05)), (PROFILE_B, (0.1, 0.8, 0.05, 0.05))):
            page.fill("#name", name)
            for factor, w in zip(("relevancy", "recency", "richness", "reputation"), weights):
                page.fill(f"#w-{factor}", str(w))
            page.click("#store")
            assert f"Stored {name}" in page.inner_text("#stored")
        browser.shot(page, "02-profiles")
        assert {PROFILE_A, PROFILE_B} <= set(page.locator("#profiles td:first-child").all_inner_texts())

        page.goto(f"{base}/console/search")
        page.fill("#q", "how do I reset the Pallas battery controller")
        page.fill("#k", "5")
        page.click("#search")
        page.wait_for_selector("#results .result")
        browser.shot(page, "03-search")
        results = page.locator("#results .result")
        assert results.count() == 5
        first = results.first
        bars = {m.get_attribute("data-factor"): float(m.get_attribute("value"))
                for m in first.locator("meter.bar").all()}
        assert set(bars) == {"relevancy", "recency", "richness", "reputation"}
        assert all(0.0 <= v <= 1.0 for v in bars.values()) and bars["relevancy"] > 0
        signals = first.locator("dl.signals").inner_text()
        assert "dense cosine" in signals and "BM25" in signals and "retrieved" in signals
        assert "P(relevant)" in first.locator(".meta").inner_text()
        stages = page.locator("#timings th").all_inner_texts()
        assert "profile" in stages and len(stages) >= 3
        ctx.close()

    await browser.run(scenario)


async def test_compare_two_profiles_on_a_query_and_on_a_judged_set(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])

    def scenario():
        ctx, page = login(browser, base, admin)
        page.goto(f"{base}/console/compare?q=latest+Pallas+firmware+update+procedure&k=8"
                  f"&a={PROFILE_A}&b={PROFILE_B}")
        rbo = float(re.search(r"[0-9.]+", page.inner_text("#rbo strong")).group())
        assert 0.0 <= rbo <= 1.0
        assert page.locator("#side-a .result").count() == page.locator("#side-b .result").count() == 8
        markers = page.locator("#side-b .marker").all_inner_texts()
        assert len(markers) == 8
        browser.shot(page, "04-compare")

        page.fill("#set-a", PROFILE_A)
        page.fill("#set-b", PROFILE_B)
        page.set_input_files("#query_set", files=[{"name": "judged.jsonl", "mimeType": "application/jsonl",
                                                   "buffer": judged_set()}])
        page.check("#store")                                      # kept for the tenant, run again below
        page.click("#evaluate")
        page.wait_for_selector("#deltas")
        browser.shot(page, "05-query-set")
        rows = page.locator("#deltas tbody tr")
        assert rows.count() == 20
        deltas = [abs(float(t)) for t in page.locator("#deltas td.delta").all_inner_texts()]
        assert deltas == sorted(deltas, reverse=True)          # sorted by change
        wins = page.inner_text("#wins")
        assert re.search(r"20 queries: B wins \d+, loses \d+, ties \d+", wins), wins
        summary = page.inner_text("#set-summary")
        assert "mean nDCG@10" in summary and "mean recall@10" in summary
        first = page.inner_text("#deltas tbody tr:first-child td:nth-child(4)")

        page.goto(f"{base}/console/compare?a={PROFILE_A}&b={PROFILE_B}")          # the stored set, in the background
        assert "judged.jsonl · 20 queries · carol-admin" in page.inner_text("#stored-set")
        page.check("#background")
        with page.expect_navigation():
            page.click("#evaluate-stored")
        assert re.search(r"/console/compare/runs/[A-Za-z0-9_-]{16,}$", page.url)
        run_url = page.url
        page.wait_for_selector("#deltas", timeout=60_000)           # the page reloads itself until done
        assert page.locator("#deltas tbody tr").count() == 20
        assert page.inner_text("#deltas tbody tr:first-child td:nth-child(4)") == first
        browser.shot(page, "05b-query-set-background")
        with page.expect_navigation():
            page.locator("#deltas a.side-by-side").first.click()      # one click to the query's side-by-side
        assert page.locator("#side-a .result").count() > 0 and page.locator("#side-b .marker").count() > 0
        ctx.close()
        ctx, page = login(browser, base, stack.keys["alice"])          # another user of acme: not hers
        assert page.goto(run_url).status == 404
        page.goto(f"{base}/console/compare")
        assert page.locator("#delete-form").count() == 0               # nor is the set hers to delete
        ctx.close()
        ctx, page = login(browser, base, admin)                        # carol stored it: she deletes it
        page.goto(f"{base}/console/compare")
        set_id = page.locator("#delete-set option", has_text="judged.jsonl").first.get_attribute("value")
        page.select_option("#delete-set", set_id)
        with page.expect_navigation():
            page.click("#delete-stored")
        assert page.locator(f'#stored-set option[value="{set_id}"]').count() == 0
        ctx.close()

    await browser.run(scenario)


async def test_a_title_with_script_shows_as_text_and_no_script_runs(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])

    def scenario():
        ctx, page = login(browser, base, admin)
        dialogs = watch_dialogs(page)
        page.goto(f"{base}/console/search?q=zebra+quokka+memo&k=3")
        title = page.locator('.result[data-artifact="console-xss-memo"] .title')
        assert title.is_visible()
        assert title.inner_text() == XSS_TITLE
        browser.shot(page, "06-hostile-title")
        hostile_id = "<script>window.__xss=3</script>"        # the why-not panel escapes an id too
        page.goto(f"{base}/console/search?q=zebra+quokka+memo&k=3&why_not=console-xss-memo+{quote(hostile_id)}")
        rows = page.locator("#why-not tr")
        assert rows.nth(1).locator("td").nth(1).inner_text() == "shown"
        assert rows.nth(2).locator("td").first.inner_text() == hostile_id
        assert "does not exist" in rows.nth(2).inner_text()
        assert_no_script_ran(page, dialogs)
        ctx.close()

    await browser.run(scenario)


async def test_a_user_without_the_admin_role_gets_403_and_a_post_needs_the_csrf_token(console):
    stack, browser = console
    base = stack.base_url

    def scenario():
        ctx, page = login(browser, base, stack.keys["alice"])
        assert page.locator("nav a", has_text="Profiles").count() == 0
        assert page.locator("nav a", has_text="Traces").count() == 0
        response = page.goto(f"{base}/console/admin/profiles")
        assert response.status == 403
        browser.shot(page, "07-admin-forbidden")
        assert page.goto(f"{base}/console/traces").status == 403
        assert page.goto(f"{base}/console/admin/tenant").status == 403
        for path in ("/console/admin/profile?name=" + PROFILE_A, "/console/admin/sources", "/console/admin/registries",
                     "/console/topics?admin=1"):
            expected = 200 if path.startswith("/console/topics") else 403
            assert page.goto(f"{base}{path}").status == expected, path
        page.goto(f"{base}/console/search")
        csrf = page.locator('form[action="/console/logout"] input[name="csrf"]').get_attribute("value")
        form = {"csrf": csrf, "name": "alice-try", "relevancy": "1", "recency": "0", "richness": "0",
                "reputation": "0", "fusion": ""}
        assert page.request.post(f"{base}/console/admin/profiles", form=form).status == 403      # role
        for path, fields in (("/console/admin/profile", {"name": "alice-try", "relevancy_weight": "1"}),
                             ("/console/admin/sources/disable", {"id": SOURCE}),
                             ("/console/admin/sources/reload", {}),
                             ("/console/admin/registries/import", {"registry": "x", "name": "y", "slug": "z"})):
            assert page.request.post(f"{base}{path}", form={"csrf": csrf, **fields}).status == 403, path
        no_token = {k: v for k, v in form.items() if k != "csrf"}
        assert page.request.post(f"{base}/console/logout", form=no_token).status == 403         # CSRF
        assert page.request.post(f"{base}/console/logout", form={"csrf": "forged"}).status == 403
        assert page.goto(f"{base}/console/search").status == 200         # the session survived both
        ctx.close()

    await browser.run(scenario)


async def test_logout_ends_the_session_server_side(console):
    stack, browser = console
    base = stack.base_url

    def scenario():
        ctx, page = login(browser, base, stack.keys["eng"], fresh=True)
        cookie = next(c for c in ctx.cookies() if c["name"] == "nucleus_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        page.click("#logout")
        page.wait_for_url(re.compile(r"/console/login$"))
        browser.shot(page, "08-logged-out")
        ctx.close()
        return cookie["value"]

    old = await browser.run(scenario)
    replay = httpx.get(f"{base}/console/search", cookies={"nucleus_console": old}, follow_redirects=False,
                       timeout=10)
    assert replay.status_code == 303 and replay.headers["location"] == "/console/login"
    bad = httpx.post(f"{base}/console/login", data={"credential": "nope", "csrf": "x"}, timeout=10)
    assert bad.status_code == 403 and bad.headers["content-security-policy"] == CSP     # no login CSRF token


async def test_the_operator_reads_search_traces_across_services_and_the_admin_the_tenant_page(console, tmp_path):
    stack, browser = console
    base = stack.base_url
    operator = ServiceSigner.load(stack.identity_dir, "operator").token("rag_pipeline")
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])
    folder = tmp_path / "handbook"                     # `nucleus ingest --sync` records the run for the page
    folder.mkdir()
    (folder / "console-sync-note.md").write_text("---\nid: console-sync-note\n---\n# Console sync note\n\n"
                                                 "The console sync note is ingested.\n")
    (folder / "empty.md").write_text("")
    client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                  interceptors=stack.operator("knowledge_store"))
    args = argparse.Namespace(path=str(folder), tenant="acme", persona="", batch=32, strict=False, sync=True,
                              watch=False, no_manifest=True, base_url=None)
    try:
        assert await cli_ingest.run(args, client, stack.auth_config.parent, Console(quiet=True)) == 2
    finally:
        await client.close()

    def scenario():
        ctx, page = login(browser, base, operator)
        assert page.locator("nav a", has_text="Traces").count() == 1
        page.goto(f"{base}/console/search?q=Pallas+battery+controller&k=3&tenant=acme")
        assert page.locator("#results .result").count() == 3
        deadline = time.monotonic() + 20           # spans reach the files in batches (a few seconds)
        while True:
            response = page.goto(f"{base}/console/traces")
            assert response.status == 200 and response.headers["content-security-policy"] == CSP
            rows = page.locator("#traces tr.trace")
            spread = [i for i in range(rows.count()) if "," in rows.nth(i).locator("td.services").inner_text()]
            if spread or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert spread, page.inner_text("#traces")
        durations = [float(t) for t in page.locator("#traces tr.trace td:nth-child(4)").all_inner_texts()]
        assert durations == sorted(durations, reverse=True)                 # slowest first
        browser.shot(page, "09-traces")
        with page.expect_navigation():
            rows.nth(spread[0]).locator("a").click()
        assert re.search(r"/console/traces/[0-9a-f]{32}$", page.url)
        services = set(page.locator("#waterfall tr.span").evaluate_all(
            "rows => rows.map(r => r.dataset.service)"))
        assert "rag-pipeline" in services and len(services) >= 2, services
        names = page.locator("#waterfall td.span-name").all_inner_texts()
        assert any("rag.search_and_rank" in n for n in names)
        bars = page.locator("#waterfall rect.span-bar")
        assert bars.count() == len(names) and float(bars.first.get_attribute("width")) > 0
        browser.shot(page, "10-trace-waterfall")
        assert page.goto(f"{base}/console/traces/not-a-trace").status == 400
        assert page.goto(f"{base}/console/admin/tenant?tenant=acme").status == 200
        assert page.inner_text("#storage").startswith("storage ")      # the store answered the operator ...
        assert page.inner_text("#data-dir").strip()                    # ... with the whole condition
        ctx.close()

        ctx, page = login(browser, base, admin)
        response = page.goto(f"{base}/console/admin/tenant")
        assert response.status == 200
        assert "acme" in page.inner_text("h1") and int(page.inner_text("#stat-entries")) > 0
        assert page.locator("#tenant-sources tbody tr").count() >= 1
        assert page.inner_text("#storage").startswith("storage ok")        # its tenant's view of the store
        assert page.inner_text("#tenant-open").startswith("open in memory")
        run = page.locator("details.run").first
        assert "of folder handbook" in run.locator("summary").inner_text()
        outcomes = dict(zip(run.locator("tr.file td:first-child").all_inner_texts(),
                            run.locator("tr.file td.outcome").all_inner_texts()))
        assert outcomes == {"empty.md": "failed", "console-sync-note.md": "ingested"}
        browser.shot(page, "11-tenant")
        ctx.close()

    try:
        await browser.run(scenario)
    finally:
        client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                      interceptors=stack.operator("knowledge_store"))
        try:
            await client.delete("acme", ["console-sync-note"])          # the session stack as it was
        finally:
            await client.close()


EDITED = "console-edited"


async def test_the_profile_editor_shows_errors_field_by_field_then_stores_the_next_version_with_history(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])

    def scenario():
        ctx, page = login(browser, base, admin)
        page.goto(f"{base}/console/admin/profile")
        page.fill("#f-name", EDITED)
        page.fill("#f-relevancy_weight", "lots")                  # not a number: refused by the form
        page.fill("#f-dense_weight", "2")                         # a number, refused by the store's validation
        with page.expect_navigation():
            page.click("#save-profile")
        assert page.inner_text("#err-relevancy_weight") == "must be a number"
        assert page.locator(".field-error").count() == 1
        assert page.input_value("#f-name") == EDITED and page.input_value("#f-dense_weight") == "2"   # kept
        browser.shot(page, "12-profile-field-error")
        page.fill("#f-relevancy_weight", "0.7")
        with page.expect_navigation():
            page.click("#save-profile")
        assert "[0, 1]" in page.inner_text("#err-dense_weight") and page.locator(".field-error").count() == 1
        page.fill("#f-dense_weight", "0.5")
        with page.expect_navigation():
            page.click("#save-profile")
        first = int(re.search(r"v(\d+)", page.inner_text("#stored")).group(1))
        page.fill("#f-recency_half_life_days", "30")
        with page.expect_navigation():
            page.click("#save-profile")
        assert page.inner_text("#stored") == f"Stored {EDITED} v{first + 1}."
        assert page.input_value("#f-recency_half_life_days") == "30.0"
        newest = page.locator("#history tr.version").first
        assert newest.get_attribute("data-version") == str(first + 1)
        assert newest.locator("li[data-field]").evaluate_all("ls => ls.map(l => l.dataset.field)") == [
            "recency_half_life_days"]
        assert "180.0" in newest.locator("del").inner_text() and "30.0" in newest.locator("ins").inner_text()
        assert page.locator("#history tr.version").count() == 2
        browser.shot(page, "13-profile-history")
        page.goto(f"{base}/console/admin/profiles")
        with page.expect_navigation():
            page.click(f'#profiles a.edit-profile:text-is("{EDITED}")')
        assert page.input_value("#f-dense_weight") == "0.5"
        ctx.close()

    await browser.run(scenario)


SOURCE = "console_remote"


async def test_a_tenant_admin_enables_and_disables_its_source_and_nobody_else_can(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])
    other_admin = stack.jwt(sub="gina-admin", tenant="globex", roles=["admin"])
    operator = ServiceSigner.load(stack.identity_dir, "operator").token("rag_pipeline")
    sources = SourcesEditor(stack.auth_config.parent / "sources.json")
    sources.add(None, {"id": SOURCE, "url": "https://console-remote.invalid/mcp", "groups": [GROUP],
                       "tenants": ["acme"], "enabled": False})

    def scenario():
        ctx, page = login(browser, base, admin)
        page.goto(f"{base}/console/admin/sources")
        with page.expect_navigation():
            page.click("#reload-sources")                 # the file was just written: read it now
        assert "reloaded" in page.inner_text("#done")
        row = page.locator(f'#sources tr[data-source="{SOURCE}"]')
        assert row.locator("td.enabled").inner_text() == "no"
        with page.expect_navigation():
            row.locator("button.toggle").click()
        assert f"enabled {SOURCE}" in page.inner_text("#done")
        assert page.locator(f'#sources tr[data-source="{SOURCE}"] td.enabled').inner_text() == "yes"
        browser.shot(page, "14-sources")
        with page.expect_navigation():
            page.locator(f'#sources tr[data-source="{SOURCE}"] button.toggle').click()
        assert page.locator(f'#sources tr[data-source="{SOURCE}"] td.enabled').inner_text() == "no"
        with page.expect_navigation():
            page.locator(f'#sources tr[data-source="{SOURCE}"] a.edit-source').click()
        page.fill("#s-url", "http://console-remote.invalid/mcp")         # a tenant admin: https only
        page.fill("#s-reputation", "0.8")
        with page.expect_navigation():
            page.click("#save-source")
        assert "https" in page.inner_text("#err-url") and page.input_value("#s-reputation") == "0.8"
        browser.shot(page, "14b-source-edit-error")
        page.fill("#s-url", "https://console-remote.invalid/mcp")
        with page.expect_navigation():
            page.click("#save-source")
        assert page.inner_text("#done").startswith(f"edited {SOURCE}: reputation")
        for path in ("/console/admin/sources/reload", "/console/admin/profile"):      # no CSRF token: refused
            assert page.request.post(f"{base}{path}", form={"name": "x"}).status == 403, path
        assert page.goto(f"{base}/console/admin/registries").status == 403            # the operator's
        ctx.close()

        ctx, page = login(browser, base, other_admin)                 # another tenant's admin: not its source
        page.goto(f"{base}/console/admin/sources")
        assert page.locator(f'#sources tr[data-source="{SOURCE}"]').count() == 0
        csrf = page.locator('form[action="/console/logout"] input[name="csrf"]').get_attribute("value")
        refused = page.request.post(f"{base}/console/admin/sources/enable", form={"csrf": csrf, "id": SOURCE})
        assert refused.status == 404 and SOURCE in refused.text()
        ctx.close()

        ctx, page = login(browser, base, operator)
        page.goto(f"{base}/console/admin/sources")
        assert page.locator(f'#sources tr[data-source="{SOURCE}"] td.enabled').inner_text() == "no"
        assert page.goto(f"{base}/console/admin/registries").status == 200
        assert page.locator("#registries tbody tr").count() >= 1
        browser.shot(page, "15-registries")
        ctx.close()

    try:
        await browser.run(scenario)
    finally:
        sources.remove(None, SOURCE)


async def test_the_topic_map_shows_documents_on_hover_and_members_on_click_with_hostile_titles_as_text(console):
    stack, browser = console
    base = stack.base_url
    admin = stack.jwt(sub="carol-admin", roles=["admin"], groups=[GROUP])

    def scenario():
        ctx, page = login(browser, base, admin)
        dialogs = watch_dialogs(page)
        deadline = time.monotonic() + 30                   # the tenant's clusters are computed on first use
        while True:
            response = page.goto(f"{base}/console/topics")
            assert response.status == 200 and response.headers["content-security-policy"] == CSP
            if page.locator("#topic-map").count() or time.monotonic() > deadline:
                break
            time.sleep(1)
        points = page.locator("#topic-map circle.pt")
        assert points.count() > 10 and page.locator("#topics tr.topic").count() >= 2
        hostile = page.locator('#topic-map circle.pt[data-artifact="console-xss-memo"]')
        assert hostile.count() == 1 and hostile.get_attribute("data-title") == XSS_TITLE
        hostile.hover()
        assert page.inner_text("#point-info").startswith(XSS_TITLE)          # the script's hover, as text
        browser.shot(page, "16-topics")
        with page.expect_navigation():
            hostile.click()                                                   # its topic's members
        assert re.search(r"/console/topics\?topic=\d+", page.url)
        member = page.locator('#members li[data-artifact="console-xss-memo"] .title')
        assert member.is_visible() and member.inner_text() == XSS_TITLE
        topic = hostile.get_attribute("data-topic")
        assert page.locator("#members li").count() == page.locator(
            f'#topic-map circle.pt[data-topic="{topic}"]').count()
        browser.shot(page, "17-topic-members")
        assert_no_script_ran(page, dialogs)
        ctx.close()

    await browser.run(scenario)
