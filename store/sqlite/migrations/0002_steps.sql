-- One row per appended step instead of one per event: data holds the
-- step's records (internal/steps' format), seq..last their sequences and
-- glast the global position of the last one; the first one's is
-- glast - (last - seq). Steps never overlap, so glast order is global
-- order. The rows of the events table are moved here by the program, one
-- step per event, and the table is dropped.
CREATE TABLE steps (
	glast   INTEGER PRIMARY KEY,
	session TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	last    INTEGER NOT NULL,
	data    BLOB    NOT NULL,
	UNIQUE (session, last)
);
