-- Cluster membership: one lease record per node name, a JSON document (address,
-- capacity, reservations, lease expiry, draining). epoch grows by one each time a node
-- acquires the name, and a renewal must carry the epoch it acquired.
CREATE TABLE nodes (
	name  TEXT PRIMARY KEY,
	epoch INTEGER NOT NULL,
	doc   TEXT NOT NULL
);
