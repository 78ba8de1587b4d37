package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// TestBlobsAreKept checks what kept relies on, for the build's driver: a
// BLOB scanned into a sql.RawBytes is a slice of its own, which the
// following rows, the query's end and further queries on the connection do
// not write over.
func TestBlobsAreKept(t *testing.T) {
	ctx := context.Background()
	db := sql.OpenDB(&connector{drv: newDriver(), dsn: filepath.Join(t.TempDir(), "blob.db")})
	defer db.Close()
	db.SetMaxOpenConns(1) // the queries below share one connection
	if _, err := db.ExecContext(ctx, `CREATE TABLE b (n INTEGER PRIMARY KEY, data BLOB)`); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{bytes.Repeat([]byte("a"), 100_000), bytes.Repeat([]byte("b"), 100_000), []byte("c")}
	for i, w := range want {
		if _, err := db.ExecContext(ctx, `INSERT INTO b VALUES (?, ?)`, i, w); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]byte
	for range 2 { // the second time on the connection the first one used
		err := query(ctx, db, `SELECT data FROM b ORDER BY n`, nil, func(rows *sql.Rows) error {
			var data sql.RawBytes
			if err := rows.Scan(&data); err != nil {
				return err
			}
			got = append(got, kept(data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, g := range got {
		if w := want[i%len(want)]; !bytes.Equal(g, w) {
			t.Fatalf("%s driver: blob %d changed after the rows that followed it: %.20q..., want %.20q...", driverName, i, g, w)
		}
	}
}
