-- The whole schema of Airlock's records in PostgreSQL, as the SQLite store keeps them
-- after its migrations 1 to 4. Records are JSON documents in doc; the other columns
-- copy what queries and constraints need. Times are fixed-width UTC text
-- (2006-01-02T15:04:05.000000000Z) under the "C" collation, so they keep their
-- nanoseconds and sort as they compare. ord is the order rows were inserted in, which
-- breaks ties between equal times.
CREATE TABLE sandboxes (
	id         TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,
	name       TEXT NOT NULL,
	state      TEXT NOT NULL,
	version    BIGINT NOT NULL,
	created_at TEXT COLLATE "C" NOT NULL,
	ord        BIGINT GENERATED ALWAYS AS IDENTITY,
	doc        TEXT NOT NULL
);

-- A name is unique per owner among live sandboxes; a terminated one frees it.
CREATE UNIQUE INDEX sandboxes_owner_name_live ON sandboxes (owner, name)
	WHERE state <> 'terminated';
CREATE INDEX sandboxes_owner_name ON sandboxes (owner, name, created_at);
CREATE INDEX sandboxes_created ON sandboxes (created_at, ord);
CREATE INDEX sandboxes_state ON sandboxes (state);

-- idempotency_key is the key hex-encoded: a key may hold any bytes, NUL included.
CREATE TABLE operations (
	id              TEXT PRIMARY KEY,
	kind            TEXT NOT NULL,
	owner           TEXT NOT NULL,
	sandbox_id      TEXT NOT NULL,
	state           TEXT NOT NULL,
	idempotency_key TEXT NOT NULL,
	request_hash    TEXT NOT NULL,
	result          TEXT,
	error_code      TEXT NOT NULL,
	error_message   TEXT NOT NULL,
	created_at      TEXT COLLATE "C" NOT NULL,
	updated_at      TEXT COLLATE "C" NOT NULL,
	ord             BIGINT GENERATED ALWAYS AS IDENTITY
);

CREATE UNIQUE INDEX operations_owner_idempotency_key ON operations (owner, idempotency_key)
	WHERE idempotency_key <> '';
CREATE INDEX operations_state ON operations (state, created_at);

-- seq is an identity: it grows and is never reused, even after rows are deleted.
CREATE TABLE events (
	seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	sandbox_id TEXT NOT NULL,
	generation BIGINT NOT NULL,
	type       TEXT NOT NULL,
	cause      TEXT NOT NULL,
	data       TEXT,
	time       TEXT COLLATE "C" NOT NULL
);

CREATE INDEX events_sandbox ON events (sandbox_id, seq);
CREATE INDEX events_time ON events (time);

CREATE TABLE identities (
	name TEXT PRIMARY KEY,
	doc  TEXT NOT NULL
);

CREATE TABLE tokens (
	id       TEXT PRIMARY KEY,
	hash     TEXT NOT NULL UNIQUE,
	identity TEXT NOT NULL,
	doc      TEXT NOT NULL
);

CREATE INDEX tokens_identity ON tokens (identity);

CREATE TABLE roles (
	name TEXT PRIMARY KEY,
	doc  TEXT NOT NULL
);

-- The hash-chained audit log. doc is kept byte for byte (BYTEA), since each record's
-- hash covers it; audit_anchor keeps the last pruned record's seq and hash.
CREATE TABLE audit_log (
	seq      BIGINT PRIMARY KEY,
	time     TEXT COLLATE "C" NOT NULL,
	identity TEXT NOT NULL,
	action   TEXT NOT NULL,
	sandbox  TEXT NOT NULL,
	doc      BYTEA NOT NULL,
	prev     TEXT NOT NULL,
	hash     TEXT NOT NULL
);

CREATE INDEX audit_log_identity ON audit_log (identity, seq);
CREATE INDEX audit_log_sandbox ON audit_log (sandbox, seq);
CREATE INDEX audit_log_time ON audit_log (time);

CREATE TABLE audit_anchor (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	seq  BIGINT NOT NULL,
	hash TEXT NOT NULL
);

-- Secrets: metadata and every version's value, sealed under the node's secret key,
-- which never enters the database. rev copies the document's, for compare-and-swap.
CREATE TABLE secrets (
	owner TEXT NOT NULL,
	name  TEXT NOT NULL,
	rev   BIGINT NOT NULL,
	doc   TEXT NOT NULL,
	PRIMARY KEY (owner, name)
);
