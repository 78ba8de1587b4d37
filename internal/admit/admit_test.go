package admit

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// order runs one waiter per priority in prios (each starts waiting in
// turn, while the gate's only slot is held) and returns the order in
// which they got the slot.
func order(t *testing.T, g *Gate, prios []Priority) []int {
	t.Helper()
	var mu sync.Mutex
	var got []int
	g.Acquire(Step) // the slot is held: everyone waits
	for i, p := range prios {
		go func() {
			g.Acquire(p)
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			g.Release()
		}()
		synctest.Wait() // i waits before i+1 comes
	}
	g.Release()
	synctest.Wait()
	return got
}

func TestPriorityThenArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(1, nil)
		got := order(t, g, []Priority{Start, Step, Resume, Step, Start, Resume})
		want := []int{2, 5, 1, 3, 0, 4}
		if len(got) != len(want) {
			t.Fatalf("served %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("served %v, want %v (Resume, then Step, then Start; in arrival order within each)", got, want)
			}
		}
		s := g.Stats()
		if s.Waited != [priorities]uint64{2, 2, 2} || s.Taken != [priorities]uint64{2, 3, 2} || s.Waiting != [priorities]int{} || s.Aged != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// A Start that waited MaxStartWait goes ahead of newer work of any
// priority: background work is not starved by a stream of steps.
func TestStartIsNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(1, nil)
		var mu sync.Mutex
		var got []string
		serve := func(p Priority, name string) {
			g.Acquire(p)
			mu.Lock()
			got = append(got, name)
			mu.Unlock()
			g.Release()
		}
		g.Acquire(Step)
		go serve(Start, "start")
		synctest.Wait()
		time.Sleep(MaxStartWait)
		// Steps come after it, each finding the slot held.
		go serve(Step, "step")
		go serve(Resume, "resume")
		synctest.Wait()
		g.Release()
		synctest.Wait()
		if len(got) != 3 || got[0] != "start" {
			t.Fatalf("served %v: the Start that waited MaxStartWait should go first", got)
		}
		if s := g.Stats(); s.Aged != 1 {
			t.Fatalf("aged %d, want 1", s.Aged)
		}
	})
}

// A Start that has not waited MaxStartWait yields to steps.
func TestStartYieldsBeforeMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(1, nil)
		got := order(t, g, []Priority{Start, Step})
		if got[0] != 1 {
			t.Fatalf("served %v: the Step should go before the Start", got)
		}
	})
}

func TestFreeSlotsNeverWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(3, nil)
		for range 3 {
			g.Acquire(Start)
		}
		blocked := make(chan struct{})
		go func() {
			g.Acquire(Resume)
			close(blocked)
		}()
		synctest.Wait()
		select {
		case <-blocked:
			t.Fatal("a fourth holder got one of three slots")
		default:
		}
		if s := g.Stats(); s.Waiting[Resume] != 1 || s.Waited != [priorities]uint64{1, 0, 0} {
			t.Fatalf("stats %+v", s)
		}
		g.Release()
		<-blocked
	})
}

// A nil gate admits everything at once.
func TestNilGate(t *testing.T) {
	var g *Gate
	for range 10 {
		g.Acquire(Step)
	}
	g.Admit(Start)
	g.Release()
	if s := g.Stats(); s != (Stats{}) {
		t.Fatalf("stats %+v", s)
	}
}

// BenchmarkUncontended is the cost a step pays on a node that is not
// saturated: a free slot taken and given back.
func BenchmarkUncontended(b *testing.B) {
	g := New(2, nil)
	for b.Loop() {
		g.Acquire(Step)
		g.Release()
	}
}

// BenchmarkContended: 8 goroutines over 2 slots, each holding its slot
// for a little work.
func BenchmarkContended(b *testing.B) {
	g := New(2, nil)
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		x := 0
		for pb.Next() {
			g.Acquire(Step)
			for i := range 100 {
				x += i
			}
			g.Release()
		}
		_ = x
	})
}
