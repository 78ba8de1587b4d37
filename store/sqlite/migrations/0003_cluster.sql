-- vigil SQLite schema, version 3: the nodes sharing the database and the
-- saved output of tasks.

-- One row per node, replaced at each heartbeat (times in unix
-- nanoseconds, by the node's own clock) and deleted at a clean stop.
CREATE TABLE nodes (
	id       TEXT PRIMARY KEY,
	address  TEXT    NOT NULL,
	started  INTEGER,
	beat     INTEGER,
	draining INTEGER NOT NULL,
	sessions INTEGER NOT NULL
);

-- A task's output in chunks: off is the byte offset of the chunk's first
-- byte, so a range is read from the chunks it overlaps only. A saved
-- output has at least one chunk (an empty output has one empty chunk);
-- its size is the last chunk's off plus its length.
CREATE TABLE outputs (
	session TEXT    NOT NULL,
	task    TEXT    NOT NULL,
	off     INTEGER NOT NULL,
	data    BLOB    NOT NULL,
	PRIMARY KEY (session, task, off)
);
