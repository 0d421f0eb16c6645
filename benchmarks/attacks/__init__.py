"""The attack suite (`nucleus attack`, `python -m benchmarks.attacks`): a secure stack attacked
as a process on the same host would, in six families, with every call counted.

    (a) ports      every gRPC method and MCP request of every service with bad credentials
    (b) matrix     principals x queries aimed at what they may not see x both transports
    (c) findings   the low findings: feedback oracle, default profile, integer ranges,
                   tools/call params, Host checks, rate limit
    (d) hostile    hostile documents, malformed links
    (f) federation cross-user, cross-tenant, forged identity, loops, hostile remotes
    (g) console    the web console over HTTP: session fixation, CSRF, stored XSS, cross-tenant
                   fields, role escalation, login limit and refused credentials, logout

The run exits non-zero when anything leaked, an expected refusal did not happen, a check
failed, or a probe could not tell (docs/SECURITY.md, "Attack suite").
"""
