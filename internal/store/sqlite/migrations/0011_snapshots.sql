-- The daemon's own record of each snapshot, which says who owns it; a manifest, which
-- a shared object store may hold, is never trusted for that.
CREATE TABLE snapshots (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    node        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX snapshots_owner ON snapshots (owner, sandbox_id, created_at);
