-- Volumes and volume snapshots: the columns a lookup needs, the whole record in doc.
CREATE TABLE volumes (
    id       TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    owner    TEXT NOT NULL,
    name     TEXT NOT NULL,
    version  INTEGER NOT NULL,
    doc      TEXT NOT NULL
);
CREATE UNIQUE INDEX volumes_name ON volumes (owner, kind, name);
