-- Lists are ordered by (created_at, id) and read a page after a place in that order,
-- so both indexes end in id: a page starts with a seek and needs no sort.
CREATE INDEX sandboxes_owner_created_id ON sandboxes (owner, created_at, id);
DROP INDEX sandboxes_created;
CREATE INDEX sandboxes_created_id ON sandboxes (created_at, id);
