-- vigil SQLite schema, version 1. Times are unix nanoseconds (UTC), NULL
-- for the zero time.

-- The log. global is the store-wide order: rowids assigned under SQLite's
-- single write lock, so commit order is global order.
CREATE TABLE events (
	global  INTEGER PRIMARY KEY AUTOINCREMENT,
	session TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	at      INTEGER,
	type    TEXT    NOT NULL,
	data    BLOB    NOT NULL,
	UNIQUE (session, seq)
);

CREATE TABLE leases (
	session TEXT PRIMARY KEY,
	owner   TEXT    NOT NULL,
	epoch   INTEGER NOT NULL,
	expires INTEGER NOT NULL
);

CREATE TABLE snapshots (
	session TEXT PRIMARY KEY,
	seq     INTEGER NOT NULL,
	data    BLOB    NOT NULL
);

CREATE TABLE sessions (
	id            TEXT PRIMARY KEY,
	title         TEXT    NOT NULL,
	owner         TEXT    NOT NULL,
	provider      TEXT    NOT NULL,
	model         TEXT    NOT NULL,
	cwd           TEXT    NOT NULL,
	closed        INTEGER NOT NULL,
	created       INTEGER,
	updated       INTEGER,
	last_seq      INTEGER NOT NULL,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL
);
CREATE INDEX sessions_owner ON sessions (owner);

-- ord keeps creation order: an upsert keeps the rowid.
CREATE TABLE agents (
	ord           INTEGER PRIMARY KEY,
	session       TEXT    NOT NULL,
	id            TEXT    NOT NULL,
	name          TEXT    NOT NULL,
	owner         TEXT    NOT NULL,
	task          TEXT    NOT NULL,
	state         TEXT    NOT NULL,
	runs          INTEGER NOT NULL,
	inbox         INTEGER NOT NULL,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	UNIQUE (session, id)
);

CREATE TABLE runs (
	session       TEXT    NOT NULL,
	agent         TEXT    NOT NULL,
	seq           INTEGER NOT NULL,
	kind          TEXT    NOT NULL,
	status        TEXT    NOT NULL,
	started       INTEGER,
	ended         INTEGER,
	reply         TEXT    NOT NULL,
	error         TEXT    NOT NULL,
	input_tokens  INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	PRIMARY KEY (session, agent, seq)
);

CREATE TABLE tasks (
	ord       INTEGER PRIMARY KEY,
	session   TEXT    NOT NULL,
	id        TEXT    NOT NULL,
	kind      TEXT    NOT NULL,
	owner     TEXT    NOT NULL,
	agent     TEXT    NOT NULL,
	status    TEXT    NOT NULL,
	command   TEXT    NOT NULL,
	started   INTEGER,
	ended     INTEGER,
	exit_code INTEGER,
	UNIQUE (session, id)
);

CREATE TABLE items (
	ord      INTEGER PRIMARY KEY,
	session  TEXT    NOT NULL,
	id       TEXT    NOT NULL,
	agent    TEXT    NOT NULL,
	kind     TEXT    NOT NULL,
	priority TEXT    NOT NULL,
	sender   TEXT    NOT NULL,
	status   TEXT    NOT NULL,
	run      INTEGER NOT NULL,
	enqueued INTEGER,
	UNIQUE (session, id)
);

-- One notification per (session, task, run): a second insert is a no-op.
CREATE TABLE notes (
	ord           INTEGER PRIMARY KEY,
	session       TEXT    NOT NULL,
	task          TEXT    NOT NULL,
	run           INTEGER NOT NULL,
	owner         TEXT    NOT NULL,
	status        TEXT    NOT NULL,
	delivery      TEXT    NOT NULL,
	delivered_run INTEGER NOT NULL,
	dropped       TEXT    NOT NULL,
	written       INTEGER,
	UNIQUE (session, task, run)
);
