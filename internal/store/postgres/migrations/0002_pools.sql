-- Warm pools: each is one JSON document (image, runtime, limits, network mode and the
-- target count of ready sandboxes). Members are ordinary sandboxes whose owner names
-- the pool; a create claims one by a compare-and-swap on its version.
CREATE TABLE pools (
	name TEXT PRIMARY KEY,
	doc  TEXT NOT NULL
);
