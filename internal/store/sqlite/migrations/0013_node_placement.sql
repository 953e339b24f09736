-- What each sandbox reserves on its node (its memory and CPU limits), as columns (they
-- are in doc too), so that placement sums every node's reservations in one query.
ALTER TABLE sandboxes ADD COLUMN memory INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN cpu REAL NOT NULL DEFAULT 0;
UPDATE sandboxes SET memory = coalesce(json_extract(doc, '$.limits.memory'), 0),
	cpu = coalesce(json_extract(doc, '$.limits.cpu'), 0);
