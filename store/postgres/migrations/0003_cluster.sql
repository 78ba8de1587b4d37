-- vigil PostgreSQL schema, version 3: the nodes sharing the database and
-- the saved output of tasks.
--
-- Appends now take event_counter's row lock in the same pipelined batch
-- that commits them (see postgres.go): the row is held while the server
-- runs that batch, never while it waits for a client, so a node paused or
-- cut off mid-transaction cannot stop the others' appends. Each commit of
-- events also notifies channel vigil_events (empty payload), which
-- Store.Watch listens to.

-- One row per node, replaced at each heartbeat (times in unix
-- nanoseconds, by the node's own clock) and deleted at a clean stop.
CREATE TABLE nodes (
	id       TEXT PRIMARY KEY,
	address  TEXT    NOT NULL,
	started  BIGINT,
	beat     BIGINT,
	draining BOOLEAN NOT NULL,
	sessions BIGINT  NOT NULL
);

-- A task's output in chunks: off is the byte offset of the chunk's first
-- byte, so a range is read from the chunks it overlaps only. A saved
-- output has at least one chunk (an empty output has one empty chunk);
-- its size is the last chunk's off plus its length.
CREATE TABLE outputs (
	session TEXT   NOT NULL,
	task    TEXT   NOT NULL,
	off     BIGINT NOT NULL,
	data    BYTEA  NOT NULL,
	PRIMARY KEY (session, task, off)
);
