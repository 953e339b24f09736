-- Identities (users and service accounts), their API tokens (only a hash of each is
-- kept) and custom roles. Each record is a JSON document in doc; the other columns copy
-- what lookups and constraints need.
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
