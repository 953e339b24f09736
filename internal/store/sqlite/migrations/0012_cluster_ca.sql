-- The one certificate authority of the cluster: its certificate in clear, its private
-- key sealed under a key derived from the cluster's join token. The first node to
-- start stores it; every later node reads it.
CREATE TABLE cluster_ca (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    cert_pem    BLOB NOT NULL,
    sealed_key  BLOB NOT NULL,
    salt        BLOB NOT NULL,
    verifier    BLOB NOT NULL,
    created_at  TEXT NOT NULL
);
