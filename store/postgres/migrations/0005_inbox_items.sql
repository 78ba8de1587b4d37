-- vigil PostgreSQL schema, version 5: the items table holds the inboxes, the
-- items that wait, not their history (the log keeps that): a row is
-- deleted when a run takes its item or the item is removed, and an item
-- taken before its row was due is never written. Rows of items that left
-- their inbox go, and with them the status and run columns.
DELETE FROM items WHERE status <> 'queued';
ALTER TABLE items DROP COLUMN status;
ALTER TABLE items DROP COLUMN run;
