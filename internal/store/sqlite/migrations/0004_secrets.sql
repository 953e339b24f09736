-- Secrets: each owner's named secret is one JSON document holding its metadata and
-- every version's value, encrypted (AES-256-GCM under the node's secret key, which
-- never enters the database).
CREATE TABLE secrets (
	owner TEXT NOT NULL,
	name  TEXT NOT NULL,
	doc   TEXT NOT NULL,
	PRIMARY KEY (owner, name)
);
