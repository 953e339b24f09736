-- Sandboxes: the whole record is the JSON document in doc; the other columns copy
-- the fields that queries and constraints need. Times are fixed-width UTC text
-- (2006-01-02T15:04:05.000000000Z), so they sort as they compare.
CREATE TABLE sandboxes (
	id         TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,
	name       TEXT NOT NULL,
	state      TEXT NOT NULL,
	version    INTEGER NOT NULL,
	created_at TEXT NOT NULL,
	doc        TEXT NOT NULL
);

-- A name is unique per owner among live sandboxes; a terminated one frees it.
CREATE UNIQUE INDEX sandboxes_owner_name_live ON sandboxes (owner, name)
	WHERE state != 'terminated';
CREATE INDEX sandboxes_owner_name ON sandboxes (owner, name, created_at);
CREATE INDEX sandboxes_created ON sandboxes (created_at);
CREATE INDEX sandboxes_state ON sandboxes (state);

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
	created_at      TEXT NOT NULL,
	updated_at      TEXT NOT NULL
);

CREATE UNIQUE INDEX operations_owner_idempotency_key ON operations (owner, idempotency_key)
	WHERE idempotency_key != '';
CREATE INDEX operations_state ON operations (state, created_at);

CREATE TABLE events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox_id TEXT NOT NULL,
	generation INTEGER NOT NULL,
	type       TEXT NOT NULL,
	cause      TEXT NOT NULL,
	data       TEXT,
	time       TEXT NOT NULL
);

CREATE INDEX events_sandbox ON events (sandbox_id, seq);
