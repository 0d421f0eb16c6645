"""The web console, served by the RAGPipeline's HTTP port at /console (docs/CONSOLE.md).

    app.py         the routes (console_routes), session and CSRF checks per page
    views.py       what a page shows, from the RAGPipeline core with the session's Principal
    evaluation.py  RBO, nDCG@10, recall@10, the uploaded query set
    traces.py      the Traces pages: SearchAndRank traces from the local trace files, waterfalls
    login.py       a credential (API key, JWT, the operator's token) -> Principal
    sessions.py    server-side sessions, the login rate limit
    security.py    CSP and companion headers, CSRF, cookies, where a login may come from
    templates/ static/   Jinja2 templates (autoescaped) and the stylesheet, shipped in the package
"""
