-- The one certificate authority of the cluster: its certificate in clear, its private
-- key sealed under a key derived from the cluster's join token. The first node to
-- start stores it; every later node reads it.
CREATE TABLE cluster_ca (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    cert_pem    BYTEA NOT NULL,
    sealed_key  BYTEA NOT NULL,
    salt        BYTEA NOT NULL,
    verifier    BYTEA NOT NULL,
    created_at  TEXT NOT NULL
);
