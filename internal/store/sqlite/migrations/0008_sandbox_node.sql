-- The node each sandbox lives on, as a column (it is in doc too), so that a node's
-- loops list only their own sandboxes through an index.
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
UPDATE sandboxes SET node = coalesce(json_extract(doc, '$.node'), '');
CREATE INDEX sandboxes_node_state ON sandboxes (node, state);
