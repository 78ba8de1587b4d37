package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/store"
)

// A Reader reads what a Store wrote, pages it like EventListAll, and its
// connection refuses any write. A database that is not a store is refused.
func TestReader(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Fresh(t)
	s := openTest(t, dsn)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s1", Owner: "node", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 5; i++ {
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s1", Epoch: l.Epoch, Records: []store.Record{{Seq: i, At: now, Type: "t", Data: []byte(`{"i":1}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.EventListAll(ctx, &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got, err := r.EventListAll(ctx, &store.EventListAllParams{AfterGlobal: want[1].Global, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Global != want[2].Global || got[1].Seq != 4 || string(got[0].Data) != `{"i":1}` {
		t.Fatalf("read %+v, the store has %+v", got, want)
	}
	if _, err := r.conn.Exec(ctx, `CREATE TABLE reader_was_here (x int)`); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("a write through the reader: %v", err)
	}
	if r.Name() == "" || strings.Contains(r.Name(), "password") {
		t.Fatalf("name %q", r.Name())
	}
	if _, err := OpenReader(ctx, pgtest.Fresh(t)); err == nil || !strings.Contains(err.Error(), "no steps table") {
		t.Fatalf("a database without steps: %v", err)
	}
}
