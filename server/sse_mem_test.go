package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/store"
)

// memFigures is what the process holds: Go heap in use and resident set.
type memFigures struct {
	heapMB, rssMB float64
}

func memNow() memFigures {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memFigures{heapMB: float64(ms.HeapInuse) / (1 << 20), rssMB: float64(procStatus("VmRSS")) / 1024}
}

func (m memFigures) String() string {
	return fmt.Sprintf("heap %.0f MB, RSS %.0f MB", m.heapMB, m.rssMB)
}

// peakSampler records the highest heap and RSS while it runs.
type peakSampler struct {
	stop chan struct{}
	done chan memFigures
}

func samplePeak() *peakSampler {
	p := &peakSampler{stop: make(chan struct{}), done: make(chan memFigures, 1)}
	go func() {
		peak := memNow()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				p.done <- peak
				return
			case <-tick.C:
				m := memNow()
				peak.heapMB, peak.rssMB = max(peak.heapMB, m.heapMB), max(peak.rssMB, m.rssMB)
			}
		}
	}()
	return p
}

func (p *peakSampler) end() memFigures {
	close(p.stop)
	return <-p.done
}

// sseCount reads an event stream and checks its ids: the first frame's id
// is where it starts, then every event's id follows the last, up to want
// events. It returns the start and the ids read.
func sseCount(ctx context.Context, client *http.Client, url, lastID string, want int, connected func()) (start int64, ids []int64, err error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	start = -1
	for len(ids) < want || start < 0 {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			continue // a long data line
		}
		if err != nil {
			return start, ids, fmt.Errorf("after %d events: %w", len(ids), err)
		}
		v, ok := strings.CutPrefix(string(line), "id: ")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return start, ids, fmt.Errorf("id %q", v)
		}
		if start < 0 {
			start = id
			if connected != nil {
				connected()
			}
			continue
		}
		ids = append(ids, id)
	}
	return start, ids, nil
}

// TestSSEFiveHundredClients connects 500 event-stream clients to a server
// whose SQLite store holds 3,000 events of 2-6 KB (about 12 MB), twice:
// as new clients naming no position (they get only what commits from then
// on); then 100 clients ask for the whole history (after=0), which the
// server pages from the store. It logs heap and RSS before, at the peak
// and after the clients leave:
//
//	go test -run TestSSEFiveHundredClients -v ./server/
//	VIGIL_TEST_REPLAYERS=500 go test -run TestSSEFiveHundredClients -v ./server/
func TestSSEFiveHundredClients(t *testing.T) {
	const clients, history, fresh = 500, 3000, 5
	h := newHarnessStore(t, sqliteStore(t))
	s := h.serve(nil)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(id)
	// Event data like a tool's output: a few kilobytes of text that does
	// not compress to nothing.
	raw := make([]byte, 4500)
	_, _ = rand.Read(raw)
	text := base64.StdEncoding.EncodeToString(raw)
	for i := range history {
		reject(t, h.rt, id, 1, text[:2000+(i*797)%4000])
	}
	recs, err := h.st.EventListAll(context.Background(), &store.EventListAllParams{})
	if err != nil {
		t.Fatal(err)
	}
	var bytesStored int
	for _, r := range recs {
		bytesStored += len(r.Data)
	}
	total := len(recs)
	endGlobal := recs[len(recs)-1].Global
	endSeq, err := h.st.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	recs = nil
	runtime.GC()
	before := memNow()
	t.Logf("store: %d events, %.1f MB of event data; before the clients: %s", total, float64(bytesStored)/(1<<20), before)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// gone waits until every server side stream has ended (its handler
	// returned) and reports memory after a GC, then after the heap's free
	// pages went back to the system (the runtime does that by itself over
	// a few minutes).
	gone := func() (afterGC, returned memFigures) {
		s.srv.streams.Wait()
		client.CloseIdleConnections()
		runtime.GC()
		afterGC = memNow()
		debug.FreeOSMemory()
		return afterGC, memNow()
	}

	// 1. New clients: half on the session's stream, half on every
	// session's; no history, then the fresh events.
	peak := samplePeak()
	var connected, finished sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		connected.Add(1)
		finished.Add(1)
		url, wantStart := s.base+"/api/sessions/"+id+"/events", endSeq
		if i%2 == 1 {
			url, wantStart = s.base+"/api/events", endGlobal
		}
		go func() {
			defer finished.Done()
			var once sync.Once
			start, ids, err := sseCount(ctx, client, url, "", fresh, func() { once.Do(connected.Done) })
			once.Do(connected.Done)
			if err != nil {
				errs <- err
				return
			}
			if start != wantStart || ids[0] != start+1 {
				errs <- fmt.Errorf("%s: a new client started after %d with event %d; want after %d (no history)", url, start, ids[0], wantStart)
			}
		}()
	}
	connected.Wait()
	connectedAll := memNow()
	reject(t, h.rt, id, fresh, "fresh")
	finished.Wait()
	p1 := peak.end()
	gc1, ret1 := gone()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d new clients (no Last-Event-ID, no after): connected %s; peak %s; after they left %s, after returning free memory %s", clients, connectedAll, p1, gc1, ret1)

	// 2. Clients asking for the whole history: 100 (12 MB each), 20
	// under the race detector, or VIGIL_TEST_REPLAYERS.
	replayers := 100
	if raceEnabled {
		replayers = 20
	}
	if n, err := strconv.Atoi(os.Getenv("VIGIL_TEST_REPLAYERS")); err == nil && n > 0 {
		replayers = n
	}
	peak = samplePeak()
	errs = make(chan error, replayers)
	var replayed sync.WaitGroup
	for range replayers {
		replayed.Add(1)
		go func() {
			defer replayed.Done()
			_, ids, err := sseCount(ctx, client, s.base+"/api/sessions/"+id+"/events?after=0", "", total+fresh, nil)
			if err != nil {
				errs <- err
				return
			}
			for i, got := range ids {
				if got != int64(i+1) {
					errs <- fmt.Errorf("replay: event %d has id %d (gap or duplicate)", i, got)
					return
				}
			}
		}()
	}
	replayed.Wait()
	p2 := peak.end()
	gc2, ret2 := gone()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d clients replaying all %d events (after=0): peak %s; after they left %s, after returning free memory %s (peak RSS of the process: %.0f MB)",
		replayers, total+fresh, p2, gc2, ret2, float64(procStatus("VmHWM"))/1024)
}
