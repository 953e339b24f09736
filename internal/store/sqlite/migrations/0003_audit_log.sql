-- The hash-chained audit log: who did what, to what, with what result. Each row's hash
-- covers its contents and the hash of the row before it (prev), so an edited, inserted
-- or deleted row breaks the chain from there on. Rows are only ever appended, and
-- pruned from the front; audit_anchor keeps the last pruned row's seq and hash, where
-- the chain that is left starts.
CREATE TABLE audit_log (
	seq      INTEGER PRIMARY KEY,
	time     TEXT NOT NULL,
	identity TEXT NOT NULL,
	action   TEXT NOT NULL,
	sandbox  TEXT NOT NULL,
	doc      TEXT NOT NULL,
	prev     TEXT NOT NULL,
	hash     TEXT NOT NULL
);

CREATE INDEX audit_log_identity ON audit_log (identity, seq);
CREATE INDEX audit_log_sandbox ON audit_log (sandbox, seq);
CREATE INDEX audit_log_time ON audit_log (time);

CREATE TABLE audit_anchor (
	id   INTEGER PRIMARY KEY CHECK (id = 1),
	seq  INTEGER NOT NULL,
	hash TEXT NOT NULL
);
