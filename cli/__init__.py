"""The operator application, above every service: the `nucleus` command.

    main.py        `nucleus` — argument parsing and dispatch only: each subcommand module
                   registers its parser (`register(sub)`) and holds its command
    stack.py       what the subcommands share: consoles, the data directory, the running
                   stack's stack.json, operator credentials, TLS CA, service targets
    lifecycle.py   `nucleus up` / `down`; search.py, ingest.py, demo.py, status.py (`status`,
                   `check`), sources.py (+ sources_file, sources_edit, sources_registry),
                   chat.py / persona.py (on agent/), backup.py, migrate.py, identity.py, traces.py
    supervisor.py  runs the three services locally (`nucleus up`): start in dependency order,
                   wait for health, restart on crash, stop gracefully; the shipped benchmarks
                   (`nucleus bench`, `nucleus attack`) start their stacks through it

Layer order (pyproject.toml [tool.importlinter], checked by tests/unit/test_layers.py):
nucleus.v1 ← shared ← ranking ← services ← cli.supervisor … ← cli.stack ← the subcommand
modules ← benchmarks, cli.demo ← cli.main; lab/ (experiments) above all, imported by none.
"""
