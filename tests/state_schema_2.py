"""The collector's state file as schema 2 wrote it (one table of what each object produced,
one of the fingerprints sent), for the tests of its migration to one row per record."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

# Schema 2's statements, as the last release of it created a file.
SCHEMA_2 = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE produced (
    source TEXT NOT NULL, source_key TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    kept BLOB,
    PRIMARY KEY (source, source_key, kind, key)
) WITHOUT ROWID;
CREATE INDEX produced_by_kind ON produced (kind, key);
CREATE TABLE sent (
    kind TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE TABLE pods (
    key TEXT PRIMARY KEY, replicaset TEXT, failing INTEGER NOT NULL, memo BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX pods_by_replicaset ON pods (replicaset) WHERE replicaset IS NOT NULL;
CREATE TABLE deployment_templates (
    namespace TEXT NOT NULL, name TEXT NOT NULL, labels BLOB NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
CREATE TABLE replicasets (
    namespace TEXT NOT NULL, name TEXT NOT NULL, deployment TEXT NOT NULL,
    revision INTEGER, created TEXT,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
CREATE INDEX replicasets_by_deployment ON replicasets (namespace, deployment);
CREATE TABLE IF NOT EXISTS event_series (
    key TEXT PRIMARY KEY, incident TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS event_series_by_incident ON event_series (incident);
CREATE INDEX IF NOT EXISTS replicasets_by_revision
    ON replicasets (namespace, deployment, COALESCE(revision, 0), name);
CREATE TABLE IF NOT EXISTS held (
    source TEXT NOT NULL, source_key TEXT NOT NULL, object BLOB NOT NULL,
    PRIMARY KEY (source, source_key)
) WITHOUT ROWID;
PRAGMA user_version = 2;
"""


def create_schema_2(path: Path) -> sqlite3.Connection:
    """A new state file of schema 2 at `path`, empty, open (commit and close it)."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_2)
    return db


def rewrite_as_schema_2(path: Path) -> None:
    """Replace the state file at `path` (of the current schema, its store closed) with the
    file schema 2 would have written for the same records, pods, series and marks."""
    older = path.with_name(path.name + ".schema-2")
    with closing(create_schema_2(older)) as db:
        db.execute("ATTACH DATABASE ? AS current", (str(path),))
        db.executescript(
            """
            INSERT INTO produced SELECT source, source_key, kind, key, kept
                FROM current.records WHERE source IS NOT NULL;
            INSERT INTO sent SELECT kind, key, fingerprint
                FROM current.records WHERE fingerprint IS NOT NULL;
            INSERT INTO meta SELECT * FROM current.meta;
            INSERT INTO pods SELECT * FROM current.pods;
            INSERT INTO event_series SELECT * FROM current.event_series;
            """
        )
        db.commit()
        db.execute("DETACH DATABASE current")
    for companion in ("-wal", "-shm"):  # they belong to the file replaced
        path.with_name(path.name + companion).unlink(missing_ok=True)
    older.replace(path)
