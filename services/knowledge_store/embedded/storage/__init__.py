"""The system of record: one SQLite database per tenant, `<data_dir>/tenants/<tenant>/store.sqlite`.

Tables (schema version 6, created in `db.py`; an older database is migrated when opened):

    meta            key → value (tenant_id, dimension, index config, schema version,
                    database id, how far index_log was trimmed)
    artifacts       one row per artifact; owners/tags/visibility_groups as JSON arrays;
                    feedback counters
    entries         one row per chunk; `rid` INTEGER PRIMARY KEY AUTOINCREMENT is the FAISS
                    id and is never reused, `entry_id` = "<artifact_id>#<chunk_index>";
                    `checksum` of the row and its vector (rowsums.py; artifacts have one too)
    entry_vectors   rid → float32 vector blob (kept apart so scans of entries stay small)
    entries_fts     FTS5 (title, body) of *analysed* terms, rowid = rid
    title_vectors   artifact_id → float32 unit vector of its title (schema 6; none for an
                    empty title; artifacts stored before are backfilled in the background)
    profiles        ranking profiles, one row per (persona, name, version)
    feedback        every vote ever cast, with its comment (a log)
    votes           each user's current vote per artifact, (artifact_id, user_id) the primary
                    key: the artifact counters count these (schema 2)
    searches        the search log: id → user, time, query SHA-256, results (JSON [[entry id,
                    artifact id, rank], ...]); bounded (../../search_log.py)
    search_votes    the votes that named a search: (search, target, user) → helpful
    source_votes    each user's current vote per federated source, (source_id, user_id) the key
    index_log       seq → rid of every vector or keyword row written (triggers): the
                    stamp of the persisted derived indexes and what they replay (index_log.py)

Durability: WAL journal with `synchronous=FULL`, so every COMMIT fsyncs the WAL before it
returns: an acknowledged ingest survives `kill -9` *and* power loss. (NORMAL would survive
a process crash but may lose the last commits on power loss, which breaks
"acknowledged = durable".) Records, keyword rows and vectors of one request change in one
transaction, so a crash leaves either all or none of them.

Concurrency: one writer connection per tenant (the core serialises writers), readers take
a connection from a small pool and read inside one transaction (a consistent snapshot).

Modules, all loaded with the package, so `from services.knowledge_store.embedded import storage` and
`storage.<module>.<name>` is the one way in (each function takes an open connection; the
caller owns the transaction):

    db              files, schema, connections (`TenantDB`: `read`, `write`, `guard`), meta
                    keys, tenant directory names: the entry point, everything starts from a
                    TenantDB
    faults          SQLite and file-system errors as typed errors naming the path (disk full,
                    read-only, corrupted, cannot open)
    checks          the consistency of records, vectors and keyword rows: cheap counts, the
                    full check's lists of missing and orphaned rows, their repair
    entries         artifacts, entries, vectors and keyword rows: writes, the loads that
                    rebuild the in-memory indexes, hit/candidate reads, counts and stats
    filter_sql      `SearchFilters` as SQL: the row ids a filter allows, metadata listings
    ranking_inputs  ranking profiles (versioned) and feedback votes
    feedback_log    the search log, the votes that named a search, votes on federated sources
    index_log       the change log: stamps, the rids changed since one, trimming
    rowsums         row checksums (schema 3): computed at write, checked on read and by the
                    scrub; rows from before are "unverified" until backfilled
"""

from services.knowledge_store.embedded.storage import (  # noqa: F401
    checks,
    db,
    entries,
    faults,
    feedback_log,
    filter_sql,
    index_log,
    ranking_inputs,
    rowsums,
)
