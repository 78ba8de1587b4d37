package vigil

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
)

// liveDelta decodes a live event, failing the test on one that breaks the
// format: Seq and Global 0, type text.delta, data a TextDelta.
func liveDelta(t *testing.T, ev Event) TextDelta {
	t.Helper()
	if !ev.Live || ev.Seq != 0 || ev.Global != 0 || ev.Type != LiveTextType || ev.At.IsZero() {
		t.Fatalf("live event %+v: want live, seq and global 0, type %s, a time", ev, LiveTextType)
	}
	var d TextDelta
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatalf("live event data %s: %v", ev.Data, err)
	}
	return d
}

// TestLiveTextBeforeModelEnded: a model's text deltas reach a session's
// subscribers and every session's as live events while the round is in
// flight. The fake Messages API server stalls the stream after a few
// deltas, so the round cannot end until the test lets it: the deltas
// that arrived came before the round's end. Then the rest streams, all
// of it before the call's model.ended, and the deltas join to the answer.
func TestLiveTextBeforeModelEnded(t *testing.T) {
	const answer = "The quick brown fox jumps over the lazy dog, twice."
	srv := providertest.NewAnthropic(t)
	stall := make(chan struct{})
	reply := providertest.TextAnswer(answer)
	reply.ChunkSize = 4
	reply.FaultAfter = 6 // message_start, ping, content_block_start, 3 deltas
	reply.Stall = stall
	srv.Push(reply)
	rt, err := Open(context.Background(), Options{
		Store: memstore.New(), Providers: map[string]provider.Provider{"anthropic": anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()})},
		DefaultProvider: "anthropic", DataDir: t.TempDir(), Node: "test", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := rt.Subscribe(ctx, &SubscribeParams{FromNow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	sess, err := rt.CreateSession(ctx, &SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := rt.Prompt(ctx, sess.ID, &PromptParams{Text: "say it"}); err != nil {
		t.Fatal(err)
	}
	stalled := true
	for _, s := range []*Subscription{sub, all} {
		var text strings.Builder
		deltas, lastSeq := 0, int64(0)
		for ev := range s.C {
			if ev.Session != sess.ID {
				continue
			}
			if ev.Live {
				d := liveDelta(t, ev)
				if d.Agent != MainAgent || d.Name != "main" || d.Run != 1 || d.Call == "" || d.Dropped || d.Reset {
					t.Fatalf("delta %+v: want main's, run 1, a call, neither dropped nor reset", d)
				}
				text.WriteString(d.Text)
				deltas++
				if stalled && deltas == 3 {
					// Three deltas while the server holds the round
					// open: they came before its end. Let it go on.
					close(stall)
					stalled = false
				}
				continue
			}
			if ev.Seq <= lastSeq {
				t.Fatalf("committed event %d after %d", ev.Seq, lastSeq)
			}
			lastSeq = ev.Seq
			if ev.Type == "model.ended" {
				if stalled {
					t.Fatalf("the round ended while the server held it, after %d deltas", deltas)
				}
				if text.String() != answer {
					t.Fatalf("the deltas before model.ended join to %q, want %q", text.String(), answer)
				}
				break
			}
		}
		if deltas < 5 {
			t.Fatalf("%d deltas: want the answer in many", deltas)
		}
	}
	d, err := rt.SessionGet(ctx, sess.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Live events have no place in the stream: none is stored.
	evs, err := rt.st.EventList(ctx, &store.EventListParams{Session: string(sess.ID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range evs {
		if r.Type == LiveTextType {
			t.Fatalf("a live event was stored: %+v", r)
		}
	}
	if int64(len(evs)) != d.Seq {
		t.Fatalf("%d stored events, the session is at %d", len(evs), d.Seq)
	}
}

// TestLiveTextSlowSubscriber: a subscriber that never reads does not slow
// the session, and what waits for it stays bounded: its queue of live
// events holds at most its share of the buffer (and a marker per call).
// The session runs to its end while the subscriber sleeps; when it reads,
// it is told live text was dropped, before the call's committed end, and
// every committed event comes, in order. A subscriber that reads, with
// room for the call's text, gets the whole text, and is not told of a
// drop.
func TestLiveTextSlowSubscriber(t *testing.T) {
	words := make([]string, 6000)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", i)
	}
	answer := strings.Join(words, " ")
	sc := &script.Scenario{Name: "long", Agents: map[string]*script.Agent{"main": {Turns: []script.Turn{{Say: answer}}}}}
	var drops atomic.Int64
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.Observer = dropObserver{&drops} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := rt.CreateSession(ctx, &SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	const buffer = 64 << 10
	slow, err := rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID, Buffer: buffer})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// The reader's share holds the whole call's live text (6,000 deltas
	// of some 240 bytes queued each), so that it gets all of it however
	// far the script model, which streams as fast as it can, runs ahead of
	// it. With the default buffer (a 256 KiB share) a reader that fell
	// some 1,100 deltas behind was told of a drop, in 2 to 4 runs of 8.
	reader, err := rt.Subscribe(ctx, &SubscribeParams{Session: sess.ID, Buffer: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var read strings.Builder
	readerDropped := false
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for ev := range reader.C {
			if ev.Live {
				var d TextDelta
				_ = json.Unmarshal(ev.Data, &d)
				read.WriteString(d.Text)
				readerDropped = readerDropped || d.Dropped
			}
			if ev.Type == "model.ended" {
				return
			}
		}
	}()
	if _, err := rt.Prompt(ctx, sess.ID, &PromptParams{Text: "talk"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		t.Fatalf("the session did not finish while a subscriber slept: %v", err)
	}
	<-readDone
	if read.String() != answer || readerDropped {
		t.Errorf("the reading subscriber got %d of %d bytes of text (dropped %v)", read.Len(), len(answer), readerDropped)
	}
	// What waits for the sleeping subscriber.
	a, err := rt.actor(string(sess.ID))
	if err != nil {
		t.Fatal(err)
	}
	a.subs.mu.Lock()
	for l := range a.subs.subs {
		l.mu.Lock()
		if l.max == buffer {
			// Records are bounded as before (a batch over the buffer
			// is taken when nothing else waits); live events by their
			// share, and a marker.
			if l.liveBytes > buffer/liveShare+1024 || l.recs > listenerQueue {
				t.Errorf("the sleeping subscriber's queue holds %d bytes of live events (share %d) and %d records", l.liveBytes, liveBytes(buffer), l.recs)
			}
			live := 0
			for _, q := range l.queue {
				if q.live != nil {
					live++
				}
			}
			t.Logf("the sleeping subscriber's queue: %d entries, %d live, %d bytes live", len(l.queue), live, l.liveBytes)
		}
		l.mu.Unlock()
	}
	a.subs.mu.Unlock()
	if drops.Load() == 0 {
		t.Error("no drop of live text was counted")
	}
	var text strings.Builder
	dropped, ended, lastSeq := false, false, int64(0)
	for ev := range slow.C {
		if ev.Live {
			d := liveDelta(t, ev)
			if ended {
				t.Fatalf("live text after the call's end: %+v", d)
			}
			dropped = dropped || d.Dropped
			text.WriteString(d.Text)
			continue
		}
		if ev.Seq != lastSeq+1 {
			t.Fatalf("committed event %d after %d", ev.Seq, lastSeq)
		}
		lastSeq = ev.Seq
		if ev.Type == "model.ended" {
			ended = true
		}
		if ev.Type == "run.ended" {
			break
		}
	}
	if !dropped || !ended || text.Len() >= len(answer) || !strings.HasPrefix(answer, text.String()[:min(text.Len(), 100)]) {
		t.Fatalf("the sleeping subscriber: told of a drop %v, saw the end %v, got %d of %d bytes", dropped, ended, text.Len(), len(answer))
	}
}

// dropObserver counts the drops it is told of.
type dropObserver struct{ n *atomic.Int64 }

func (o dropObserver) RunStarted(SessionID, string)                           {}
func (o dropObserver) RunEnded(SessionID, string)                             {}
func (o dropObserver) NotificationWritten(SessionID, string)                  {}
func (o dropObserver) NotificationDelivered(SessionID, string, time.Duration) {}
func (o dropObserver) MessageResolved(SessionID, string)                      {}
func (o dropObserver) Dropped(SessionID, string, string)                      { o.n.Add(1) }
func (o dropObserver) ModelCall(string, time.Duration, error)                 {}
