-- vigil PostgreSQL schema, version 1. Times are unix nanoseconds (UTC), NULL
-- for the zero time: timestamptz keeps only microseconds.

-- The log. global is assigned from event_counter at append; see
-- event_counter.
CREATE TABLE events (
	global  BIGINT PRIMARY KEY,
	session TEXT   NOT NULL,
	seq     BIGINT NOT NULL,
	at      BIGINT,
	type    TEXT   NOT NULL,
	data    BYTEA  NOT NULL,
	UNIQUE (session, seq)
);

-- The last Global handed out. An append takes this row's lock (UPDATE) as
-- its last statement and holds it until its commit, so appends commit in
-- Global order and a reader never sees a Global before a lower one that
-- commits later (which a plain sequence allows).
CREATE TABLE event_counter (
	id   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
	last BIGINT  NOT NULL
);
INSERT INTO event_counter (id, last) VALUES (TRUE, 0);

CREATE TABLE leases (
	session TEXT PRIMARY KEY,
	owner   TEXT   NOT NULL,
	epoch   BIGINT NOT NULL,
	expires BIGINT NOT NULL
);

CREATE TABLE snapshots (
	session TEXT PRIMARY KEY,
	seq     BIGINT NOT NULL,
	data    BYTEA  NOT NULL
);

CREATE TABLE sessions (
	id            TEXT PRIMARY KEY,
	title         TEXT    NOT NULL,
	owner         TEXT    NOT NULL,
	provider      TEXT    NOT NULL,
	model         TEXT    NOT NULL,
	cwd           TEXT    NOT NULL,
	closed        BOOLEAN NOT NULL,
	created       BIGINT,
	updated       BIGINT,
	last_seq      BIGINT  NOT NULL,
	input_tokens  BIGINT  NOT NULL,
	output_tokens BIGINT  NOT NULL
);
CREATE INDEX sessions_owner ON sessions (owner);

-- ord keeps creation order: an upsert keeps it.
CREATE TABLE agents (
	ord           BIGSERIAL PRIMARY KEY,
	session       TEXT   NOT NULL,
	id            TEXT   NOT NULL,
	name          TEXT   NOT NULL,
	owner         TEXT   NOT NULL,
	task          TEXT   NOT NULL,
	state         TEXT   NOT NULL,
	runs          BIGINT NOT NULL,
	inbox         BIGINT NOT NULL,
	input_tokens  BIGINT NOT NULL,
	output_tokens BIGINT NOT NULL,
	UNIQUE (session, id)
);

CREATE TABLE runs (
	session       TEXT   NOT NULL,
	agent         TEXT   NOT NULL,
	seq           BIGINT NOT NULL,
	kind          TEXT   NOT NULL,
	status        TEXT   NOT NULL,
	started       BIGINT,
	ended         BIGINT,
	reply         TEXT   NOT NULL,
	error         TEXT   NOT NULL,
	input_tokens  BIGINT NOT NULL,
	output_tokens BIGINT NOT NULL,
	PRIMARY KEY (session, agent, seq)
);

CREATE TABLE tasks (
	ord       BIGSERIAL PRIMARY KEY,
	session   TEXT NOT NULL,
	id        TEXT NOT NULL,
	kind      TEXT NOT NULL,
	owner     TEXT NOT NULL,
	agent     TEXT NOT NULL,
	status    TEXT NOT NULL,
	command   TEXT NOT NULL,
	started   BIGINT,
	ended     BIGINT,
	exit_code BIGINT,
	UNIQUE (session, id)
);

CREATE TABLE items (
	ord      BIGSERIAL PRIMARY KEY,
	session  TEXT   NOT NULL,
	id       TEXT   NOT NULL,
	agent    TEXT   NOT NULL,
	kind     TEXT   NOT NULL,
	priority TEXT   NOT NULL,
	sender   TEXT   NOT NULL,
	status   TEXT   NOT NULL,
	run      BIGINT NOT NULL,
	enqueued BIGINT,
	UNIQUE (session, id)
);

-- One notification per (session, task, run): a second insert is a no-op.
CREATE TABLE notes (
	ord           BIGSERIAL PRIMARY KEY,
	session       TEXT   NOT NULL,
	task          TEXT   NOT NULL,
	run           BIGINT NOT NULL,
	owner         TEXT   NOT NULL,
	status        TEXT   NOT NULL,
	delivery      TEXT   NOT NULL,
	delivered_run BIGINT NOT NULL,
	dropped       TEXT   NOT NULL,
	written       BIGINT,
	UNIQUE (session, task, run)
);
