-- A fingerprint of each key the nodes of one store must share, recorded by the first
-- node to start and compared by every later one.
CREATE TABLE cluster_keys (
    name        TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
