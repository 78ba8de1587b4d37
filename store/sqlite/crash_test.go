package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

const crashChildEnv = "VIGIL_SQLITE_CRASH_CHILD"

// crashStart is the crash child's clock.
func crashStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// crashStep is the deterministic step a crash child appends at seq.
func crashStep(sess string, seq int64) ([]store.Record, *store.Projection) {
	rs := make([]store.Record, 3)
	for i := range rs {
		q := seq + int64(i)
		rs[i] = store.Record{Session: sess, Seq: q, At: crashStart().Add(time.Duration(q)), Type: "crash.step",
			Data: fmt.Appendf(nil, `{"session":%q,"seq":%d,"pad":%q}`, sess, q, strings.Repeat("x", 200))}
	}
	last := seq + int64(len(rs)) - 1
	return rs, &store.Projection{
		Session: &store.SessionRow{ID: sess, Created: crashStart(), Updated: crashStart(), LastSeq: last},
		Notes:   []store.NoteRow{{Session: sess, Task: "t", Run: int(last), Owner: "main", Status: "completed", Written: crashStart(), New: true}},
	}
}

// crashChild appends steps to four sessions until it is killed, printing
// "ack <session> <last seq>" after each append returned.
func crashChild(path string) {
	ctx := context.Background()
	s, err := Open(ctx, path, nil)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 {
		sess := fmt.Sprintf("s%d", i)
		wg.Go(func() {
			l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: sess, Owner: "child", TTL: time.Minute, Now: crashStart()})
			if err != nil {
				fmt.Println("lease:", err)
				os.Exit(2)
			}
			for seq := int64(1); seq < 1_000_000; seq += 3 {
				rs, p := crashStep(sess, seq)
				if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: sess, Epoch: l.Epoch, Records: rs, Projection: p}); err != nil {
					fmt.Println("append:", err)
					os.Exit(2)
				}
				out.Lock()
				fmt.Printf("ack %s %d\n", sess, seq+2) // one write(2): a line is all there or not
				out.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestCrashSafety kills (SIGKILL) a child process that appends in a loop
// and checks that the reopened log is contiguous, holds every event the
// child was told was committed, and matches its projection rows.
func TestCrashSafety(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "vigil.db")
	for round := range 3 {
		acked := runCrashChild(t, path, 150*(round+1))
		s := openTest(t, path, nil)
		ctx := context.Background()
		for sess, ack := range acked {
			got, err := s.EventList(ctx, &store.EventListParams{Session: sess})
			if err != nil {
				t.Fatal(err)
			}
			n := int64(len(got))
			if n < ack {
				t.Fatalf("round %d: %s has %d events, but %d were acknowledged", round, sess, n, ack)
			}
			if n%3 != 0 {
				t.Fatalf("round %d: %s has %d events: a step was torn", round, sess, n)
			}
			for i, r := range got {
				want, _ := crashStep(sess, int64(i)-int64(i%3)+1)
				if w := want[i%3]; r.Seq != int64(i)+1 || string(r.Data) != string(w.Data) || !r.At.Equal(w.At) {
					t.Fatalf("round %d: %s record %d is %d %s", round, sess, i, r.Seq, r.Data)
				}
			}
			row, err := s.SessionGet(ctx, sess)
			if err != nil || row.LastSeq != n {
				t.Fatalf("round %d: %s row %+v, %v; log has %d events", round, sess, row, err, n)
			}
			notes, err := s.NoteList(ctx, sess)
			if err != nil || int64(len(notes)) != n/3 {
				t.Fatalf("round %d: %s has %d notes for %d steps, %v", round, sess, len(notes), n/3, err)
			}
			t.Logf("round %d: %s: %d events, %d acknowledged", round, sess, n, ack)
		}
		// A new owner takes over and goes on.
		l, err := s.LeaseAcquire(ctx, &store.LeaseAcquireParams{Session: "s0", Owner: "parent", TTL: time.Minute, Now: crashStart().Add(time.Hour)})
		if err != nil || l.Epoch != 2 {
			t.Fatalf("round %d: lease after the crash: %+v, %v", round, l, err)
		}
		next, err := s.LastSeq(ctx, "s0")
		if err != nil {
			t.Fatal(err)
		}
		rs, p := crashStep("s0", next+1)
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{Session: "s0", Epoch: l.Epoch, Records: rs, Projection: p}); err != nil {
			t.Fatalf("round %d: append after the crash: %v", round, err)
		}
		all, err := s.EventListAll(ctx, &store.EventListAllParams{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(all); i++ {
			if all[i].Global <= all[i-1].Global {
				t.Fatalf("global order broken at %d", i)
			}
		}
		// Start the next round from a clean log: the child starts at seq 1.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
}

// runCrashChild starts the child, kills it after it acknowledged n appends
// and returns the last acknowledged seq of each session.
func runCrashChild(t *testing.T, path string, n int) map[string]int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{}
	count := 0
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			t.Errorf("child: %s", sc.Text())
			continue
		}
		seq, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("child: %q: %v", sc.Text(), err)
		}
		acked[f[1]] = max(acked[f[1]], seq)
		if count++; count == n && !killed {
			killed = true
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child ended before it was killed: %v", err)
	}
	if len(acked) == 0 {
		t.Fatal("child acknowledged nothing")
	}
	return acked
}
