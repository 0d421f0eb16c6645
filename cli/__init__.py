"""The operator application, above every service: the `nucleus` command.

    main.py        `nucleus` — up/down/status/ingest/search/demo, and the commands that
                   benchmarks/ and traces.py register
    supervisor.py  runs the three services locally (`nucleus up`): start in dependency order,
                   wait for health, restart on crash, stop gracefully
    traces.py      `nucleus traces` — reads the services' span files, draws waterfalls
    identity.py    `nucleus identity` — the stack's service key pairs: init, rotate, revoke, token

Layer order (checked by tests/unit/test_layers.py): nucleus.v1 ← shared ← ranking ←
services ← cli, benchmarks.
"""
