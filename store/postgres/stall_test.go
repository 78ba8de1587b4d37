package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vigilrun/vigil/store"
)

// pollGuard bounds how long a test polls the database for a state it
// waits for (a hang guard, not a latency bound).
const pollGuard = time.Minute

func openOpts(t testing.TB, dsn string, opts *Options) *Store {
	t.Helper()
	opts.MaxConns = 8
	opts.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawConn connects as a Store's connections do, with opts' settings: a
// node's connection the test drives by hand.
func rawConn(t testing.TB, dsn string, opts *Options) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	configure(&cfg.Config, opts)
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// idleInTx reports whether backend pid is alive and idle in a transaction.
func idleInTx(t testing.TB, s *Store, pid uint32) bool {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'`, int32(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// waitGone polls until backend pid has ended.
func waitGone(t testing.TB, s *Store, pid uint32, what string) {
	t.Helper()
	deadline := time.Now().Add(pollGuard)
	for {
		var n int
		if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: backend %d still there after %v", what, pid, pollGuard)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func appendNext(ctx context.Context, s *Store, sess string, epoch int64) error {
	last, err := s.LastSeq(ctx, sess)
	if err != nil {
		return err
	}
	_, err = s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: epoch, Records: rec(last+1, sess)})
	return err
}

// TestLockedLeaseStallsOnlyItsSession: a transaction of another node that
// locks one session's lease row and then waits (a node paused or cut off
// inside a transaction) holds up nobody but that session: the other
// stores' lease calls and appends of other sessions go through while it
// still holds the row, those of that session fail after lock_timeout
// with ErrUnavailable (an append sharing a group with them is not
// failed), and idle_in_transaction_session_timeout ends it. A
// transaction that holds no row holds up nobody.
func TestLockedLeaseStallsOnlyItsSession(t *testing.T) {
	dsn := testDB(t)
	short := &Options{LockTimeout: 200 * time.Millisecond}
	a, b := openOpts(t, dsn, short), openOpts(t, dsn, &Options{LockTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	epochs := map[string]int64{}
	for _, sess := range []string{"held", "free", "free2"} {
		l, err := a.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "node-a", TTL: time.Minute, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		epochs[sess] = l.Epoch
		if err := appendNext(ctx, a, sess, l.Epoch); err != nil {
			t.Fatal(err)
		}
	}

	// Two transactions that then wait for their client, with no idle
	// timeout of their own: one holding nothing, one holding held's
	// lease row.
	noIdle := &Options{IdleInTransactionTimeout: -1}
	empty, locker := rawConn(t, dsn, noIdle), rawConn(t, dsn, noIdle)
	if _, err := empty.Exec(ctx, "BEGIN; SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var epoch int64
	if err := locker.QueryRow(ctx, `SELECT epoch FROM leases WHERE session = 'held' FOR UPDATE`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}

	// Other sessions: every call goes through.
	lb, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "other", Owner: "node-b", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatalf("node-b acquiring another session: %v", err)
	}
	for range 3 {
		if err := appendNext(ctx, b, "other", lb.Epoch); err != nil {
			t.Fatalf("node-b appending to another session: %v", err)
		}
		if err := appendNext(ctx, a, "free", epochs["free"]); err != nil {
			t.Fatalf("node-a appending to another session of its own: %v", err)
		}
	}
	if _, err := store.RenewOne(ctx, b, "other", "node-b", lb.Epoch, time.Minute, now); err != nil {
		t.Fatalf("node-b renewing another session: %v", err)
	}
	if err := b.SnapshotSave(ctx, &store.SnapshotSaveParams{Session: "other", Epoch: lb.Epoch, Seq: 1, Data: []byte("x")}); err != nil {
		t.Fatalf("node-b saving a snapshot of another session: %v", err)
	}
	if err := store.ReleaseOne(ctx, b, "other", "node-b", lb.Epoch); err != nil {
		t.Fatalf("node-b releasing another session: %v", err)
	}

	// The locked session: its calls fail after lock_timeout, and an
	// append queued with them still commits.
	_, err = b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "held", Owner: "node-b", TTL: time.Minute, Now: now.Add(time.Hour)})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("node-b acquiring the locked session: %v, want ErrUnavailable", err)
	}
	heldErr := appendNext(ctx, a, "held", epochs["held"])
	if !errors.Is(heldErr, store.ErrUnavailable) {
		t.Fatalf("append to the locked session: %v, want ErrUnavailable", heldErr)
	}
	// In one group with another session's append: the writer is held
	// in a group of free's until both are queued.
	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() { once.Do(func() { close(entered); <-resume }) }
	a.w.hook.Store(&hook)
	var wg sync.WaitGroup
	var freeErr error
	wg.Go(func() { freeErr = appendNext(ctx, a, "free", epochs["free"]) })
	<-entered
	a.w.hook.Store(nil)
	for _, sess := range []string{"held", "free2"} {
		last, err := a.LastSeq(ctx, sess)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			_, err := a.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: epochs[sess], Records: rec(last+1, sess)})
			if sess == "held" {
				heldErr = err
			} else if err != nil {
				t.Errorf("append to another session in the group of the locked one: %v", err)
			}
		})
	}
	for deadline := time.Now().Add(pollGuard); len(a.jobs) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the appends were not queued")
		}
	}
	close(resume)
	wg.Wait()
	if freeErr != nil {
		t.Fatal(freeErr)
	}
	if !errors.Is(heldErr, store.ErrUnavailable) {
		t.Fatalf("append to the locked session in a group: %v, want ErrUnavailable", heldErr)
	}
	for _, c := range []*pgx.Conn{empty, locker} {
		if !idleInTx(t, a, c.PgConn().PID()) {
			t.Fatal("the waiting transactions ended before the calls were done: the calls may have waited for them")
		}
	}
	if _, err := locker.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := appendNext(ctx, a, "held", epochs["held"]); err != nil {
		t.Fatalf("append to the session once its row is free: %v", err)
	}

	// With idle_in_transaction_session_timeout, the server ends such a
	// transaction by itself, and the session is free again.
	idler := rawConn(t, dsn, &Options{IdleInTransactionTimeout: 300 * time.Millisecond})
	if _, err := idler.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := idler.QueryRow(ctx, `SELECT epoch FROM leases WHERE session = 'held' FOR UPDATE`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	waitGone(t, a, idler.PgConn().PID(), "idle transaction")
	if _, err := idler.Exec(ctx, "SELECT 1"); err == nil || !lost(err) {
		t.Fatalf("the ended transaction's connection: %v, want it lost", err)
	}
	if err := appendNext(ctx, a, "held", epochs["held"]); err != nil {
		t.Fatalf("append after the idle transaction was ended: %v", err)
	}
	got, err := a.EventList(ctx, &store.EventListParams{Session: "held"})
	if err != nil || len(got) != 3 {
		t.Fatalf("held's log: %d events, %v; want 3", len(got), err)
	}
}

// TestPausedWriterStallsNobody pauses a store's writer inside its group
// transaction, with its sessions' lease rows locked (the only point where
// the writer waits for itself inside a transaction: event_counter is
// taken and committed in one later batch): another store's appends go on
// meanwhile; the server ends the paused transaction after
// idle_in_transaction_session_timeout, and the paused store recovers on
// a new connection once it resumes.
func TestPausedWriterStallsNobody(t *testing.T) {
	dsn := testDB(t)
	a := openOpts(t, dsn, &Options{IdleInTransactionTimeout: 300 * time.Millisecond})
	b := openOpts(t, dsn, &Options{})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	la, err := a.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "a", Owner: "node-a", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "b", Owner: "node-b", TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := appendNext(ctx, a, "a", la.Epoch); err != nil {
		t.Fatal(err)
	}
	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() { once.Do(func() { close(entered); <-resume }) }
	a.w.hook.Store(&hook)
	paused := make(chan error, 1)
	go func() { paused <- appendNext(ctx, a, "a", la.Epoch) }()
	<-entered
	pid := a.writerPID.Load()
	if !idleInTx(t, b, pid) {
		t.Fatal("the paused writer is not idle in a transaction")
	}
	for i := range 20 {
		if err := appendNext(ctx, b, "b", lb.Epoch); err != nil {
			t.Fatalf("node-b append %d while node-a's writer is paused: %v", i, err)
		}
	}
	if _, err := b.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "c", Owner: "node-b", TTL: time.Minute, Now: now}); err != nil {
		t.Fatalf("node-b acquiring while node-a's writer is paused: %v", err)
	}
	waitGone(t, b, pid, "paused writer's transaction")
	close(resume)
	err = <-paused
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("the paused append: %v, want success (retried) or ErrUnavailable", err)
	}
	last, lerr := a.LastSeq(ctx, "a")
	if lerr != nil {
		t.Fatal(lerr)
	}
	switch {
	case err == nil && last != 2:
		t.Fatalf("the paused append succeeded, log ends at %d", last)
	case err != nil && last != 1:
		t.Fatalf("the paused append failed, its transaction was ended, but the log ends at %d", last)
	}
	if err := appendNext(ctx, a, "a", la.Epoch); err != nil {
		t.Fatalf("node-a after it resumed: %v", err)
	}
	got, err := b.EventList(ctx, &store.EventListParams{Session: "b"})
	if err != nil || len(got) != 20 {
		t.Fatalf("node-b's log: %d events, %v", len(got), err)
	}
	t.Logf("the paused append: %v", err)
}

// TestConnectionSettings: a Store's connections carry the timeouts and
// keepalives of its Options (or the defaults), and those the DSN sets win.
func TestConnectionSettings(t *testing.T) {
	dsn := testDB(t)
	show := func(s *Store, name string) string {
		t.Helper()
		var v string
		if err := s.pool.QueryRow(context.Background(), "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	def := openOpts(t, dsn, &Options{})
	for name, want := range map[string]string{"lock_timeout": "5s", "statement_timeout": "1min",
		"idle_in_transaction_session_timeout": "10s", "tcp_keepalives_idle": "5", "tcp_keepalives_interval": "5",
		"tcp_keepalives_count": "3", "tcp_user_timeout": "20000", "jit": "off"} {
		if got := show(def, name); got != want {
			t.Errorf("default %s = %s, want %s", name, got, want)
		}
	}
	set := openOpts(t, dsn, &Options{LockTimeout: 1500 * time.Millisecond, StatementTimeout: -1, IdleInTransactionTimeout: time.Minute, KeepAlive: 2 * time.Second})
	for name, want := range map[string]string{"lock_timeout": "1500ms", "statement_timeout": "0",
		"idle_in_transaction_session_timeout": "1min", "tcp_keepalives_idle": "2", "tcp_user_timeout": "8000"} {
		if got := show(set, name); got != want {
			t.Errorf("set %s = %s, want %s", name, got, want)
		}
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	own := openOpts(t, dsn+sep+"lock_timeout=1234&options=-c%20statement_timeout%3D7s%20-c%20jit%3Don", &Options{LockTimeout: time.Second})
	for name, want := range map[string]string{"lock_timeout": "1234ms", "statement_timeout": "7s", "idle_in_transaction_session_timeout": "10s", "jit": "on"} {
		if got := show(own, name); got != want {
			t.Errorf("DSN's %s = %s, want %s", name, got, want)
		}
	}
	// The writer's and the listener's connections are configured alike.
	for what, cfg := range map[string]*pgx.ConnConfig{"writer": set.w.cfg, "listener": set.listenCfg} {
		if cfg.RuntimeParams["lock_timeout"] != "1500" || cfg.RuntimeParams["idle_in_transaction_session_timeout"] != "60000" ||
			cfg.RuntimeParams["tcp_keepalives_idle"] != "2" || cfg.DialFunc == nil {
			t.Errorf("%s's connection: runtime parameters %v", what, cfg.RuntimeParams)
		}
	}
}
