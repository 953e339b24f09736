-- An owner's sandboxes in creation order, as a list reads them: no sort of every
-- matching row per list.
CREATE INDEX sandboxes_owner_created ON sandboxes (owner, created_at);
