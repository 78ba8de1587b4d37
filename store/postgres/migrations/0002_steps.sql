-- vigil PostgreSQL schema, version 2: one log row per appended step
-- instead of one per event.
--
-- data holds the step's records in internal/steps' format; seq..last are
-- their sequences and global..glast their global positions (both
-- contiguous). Steps never overlap in either, so glast order is global
-- order. Globals still come from event_counter, once per committed group of
-- steps (see postgres.go).
CREATE TABLE steps (
	session TEXT   NOT NULL,
	seq     BIGINT NOT NULL,
	last    BIGINT NOT NULL,
	global  BIGINT NOT NULL,
	glast   BIGINT NOT NULL,
	data    BYTEA  NOT NULL,
	PRIMARY KEY (session, seq)
);

-- The events of a version 1 database become steps of one record each,
-- encoded here in internal/steps' format (version byte, record count, then
-- per record: a time flag and zigzag varint unix nanoseconds, the type's
-- length and bytes, the body's length and bytes). The functions live in
-- this session's temporary schema and are dropped below.
CREATE FUNCTION pg_temp.vigil_uvarint(n BIGINT) RETURNS BYTEA LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
	out BYTEA := '\x'::BYTEA;
BEGIN
	-- n is read as an unsigned 64-bit integer: a negative one has its top
	-- bit set, and the shift is made logical by masking the sign bits.
	WHILE n < 0 OR n >= 128 LOOP
		out := out || set_byte('\x00'::BYTEA, 0, ((n & 127) | 128)::INT);
		n := (n >> 7) & 144115188075855871; -- 2^57 - 1
	END LOOP;
	RETURN out || set_byte('\x00'::BYTEA, 0, n::INT);
END $$;

CREATE FUNCTION pg_temp.vigil_step(at BIGINT, type TEXT, data BYTEA) RETURNS BYTEA LANGUAGE sql IMMUTABLE AS $$
	SELECT '\x0101'::BYTEA -- format version 1, one record
		|| CASE WHEN at IS NULL THEN '\x00'::BYTEA
			ELSE '\x01'::BYTEA || pg_temp.vigil_uvarint(CASE WHEN at < 0 THEN ~(at << 1) ELSE at << 1 END) END
		|| pg_temp.vigil_uvarint(octet_length(convert_to(type, 'UTF8'))) || convert_to(type, 'UTF8')
		|| pg_temp.vigil_uvarint(octet_length(data)) || data
$$;

INSERT INTO steps (session, seq, last, global, glast, data)
	SELECT session, seq, seq, global, global, pg_temp.vigil_step(at, type, data) FROM events;

DROP FUNCTION pg_temp.vigil_step(BIGINT, TEXT, BYTEA);
DROP FUNCTION pg_temp.vigil_uvarint(BIGINT);
DROP TABLE events;

-- EventListAll reads by glast.
CREATE UNIQUE INDEX steps_glast ON steps (glast);
