-- What each sandbox reserves on its node (its memory and CPU limits), as columns (they
-- are in doc too), so that placement sums every node's reservations in one query.
ALTER TABLE sandboxes ADD COLUMN memory BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN cpu DOUBLE PRECISION NOT NULL DEFAULT 0;
UPDATE sandboxes SET memory = coalesce((doc::json -> 'limits' ->> 'memory')::bigint, 0),
	cpu = coalesce((doc::json -> 'limits' ->> 'cpu')::double precision, 0);
