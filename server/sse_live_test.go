package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestSSELiveText: while a model's round is in flight (the fake Messages
// API server holds the stream open after a few deltas), both event
// streams carry its text as live frames: "event: text.delta", data the
// Event with "live":true, seq and global 0, and no id: line. A client
// that reconnects with the Last-Event-ID it has, which the live frames
// left at the last committed event, gets every committed event after it,
// none twice, and none of the live text it had before: only what streams
// after, then the call's model.ended.
func TestSSELiveText(t *testing.T) {
	t.Parallel()
	const answer = "Streaming text reaches the browser before the round ends."
	srv := providertest.NewAnthropic(t)
	stall := make(chan struct{})
	reply := providertest.TextAnswer(answer)
	reply.ChunkSize = 5
	reply.FaultAfter = 6 // message_start, ping, content_block_start, 3 deltas
	reply.Stall = stall
	srv.Push(reply)
	logger := slog.New(slog.NewTextHandler(logWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	st := memstore.New()
	rt, err := vigil.Open(context.Background(), vigil.Options{
		Store: st, Providers: map[string]provider.Provider{"anthropic": anthropic.New(anthropic.Options{APIKey: "sk-test", BaseURL: srv.BaseURL()})},
		DefaultProvider: "anthropic", DataDir: t.TempDir(), Node: "test", Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := New(rt, Options{Token: testToken, Logger: logger})
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
		rt.Close()
		st.Close()
	})
	ctx := context.Background()
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	id := string(sess.ID)
	one := openSSE(t, ts.URL, "/api/sessions/"+id+"/events?after=0", "")
	all := openSSE(t, ts.URL, "/api/events", "")
	one.keepLive, all.keepLive = true, true
	one.start()
	all.start()
	if _, err := rt.Prompt(ctx, sess.ID, &vigil.PromptParams{Text: "go"}); err != nil {
		t.Fatal(err)
	}
	// readLive reads s until it has n live frames, checking each; it
	// returns their text and the last id a committed frame had.
	readLive := func(s *sseStream, n int, bySeq bool) (text string, lastID int64) {
		t.Helper()
		for got := 0; got < n; {
			ev, err := s.next()
			if err != nil {
				t.Fatalf("after %d live frames: %v", got, err)
			}
			if ev.data.Session != sess.ID {
				continue
			}
			if !ev.data.Live {
				if ev.event == "model.ended" {
					t.Fatalf("the round ended while the server held it")
				}
				want := ev.data.Global
				if bySeq {
					want = ev.data.Seq
				}
				if ev.id != strconv.FormatInt(want, 10) {
					t.Fatalf("committed frame %s has id %q, want %d", ev.event, ev.id, want)
				}
				lastID = want
				continue
			}
			var d vigil.TextDelta
			if err := json.Unmarshal(ev.data.Data, &d); err != nil {
				t.Fatalf("live frame data %s: %v", ev.raw, err)
			}
			switch {
			case ev.event != vigil.LiveTextType || ev.data.Type != vigil.LiveTextType:
				t.Fatalf("live frame event %q, type %q", ev.event, ev.data.Type)
			case ev.id != "":
				t.Fatalf("live frame with id %q: %s", ev.id, ev.raw)
			case ev.data.Seq != 0 || ev.data.Global != 0 || !strings.Contains(ev.raw, `"live":true`):
				t.Fatalf("live frame data %s: want seq and global 0, live true", ev.raw)
			case d.Agent != vigil.MainAgent || d.Name != "main" || d.Run != 1 || d.Call == "":
				t.Fatalf("live frame data %s: want main's run 1 and its call", ev.raw)
			}
			text += d.Text
			got++
		}
		return text, lastID
	}
	// Three deltas of five characters while the server holds the rest.
	before, lastSeq := readLive(one, 3, true)
	if before != answer[:15] {
		t.Fatalf("live text %q, want %q", before, answer[:15])
	}
	if beforeAll, _ := readLive(all, 3, false); beforeAll != before {
		t.Fatalf("every session's stream: live text %q, want %q", beforeAll, before)
	}
	if lastSeq == 0 {
		t.Fatal("no committed frame before the live ones")
	}
	// Reconnect with the last id: the live frames did not move it.
	one.close()
	again := openSSE(t, ts.URL, "/api/sessions/"+id+"/events", strconv.FormatInt(lastSeq, 10))
	again.keepLive = true
	if start := again.start(); start != lastSeq {
		t.Fatalf("reconnected stream starts after %d, want %d", start, lastSeq)
	}
	close(stall)
	var after strings.Builder
	next := lastSeq + 1
	for {
		ev, err := again.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.data.Live {
			var d vigil.TextDelta
			_ = json.Unmarshal(ev.data.Data, &d)
			after.WriteString(d.Text)
			continue
		}
		if ev.data.Seq != next || ev.id != strconv.FormatInt(next, 10) {
			t.Fatalf("after reconnecting: event %d (id %q), want %d", ev.data.Seq, ev.id, next)
		}
		next++
		if ev.event == "model.ended" {
			break
		}
	}
	if before+after.String() != answer {
		t.Fatalf("live text %q then, after reconnecting, %q: want the rest of %q and nothing twice", before, after.String(), answer)
	}
	// A stream from the beginning replays committed events only.
	replay := openSSE(t, ts.URL, "/api/sessions/"+id+"/events?after=0", "")
	replay.keepLive = true
	replay.start()
	for seq := int64(1); seq < next; seq++ {
		ev, err := replay.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.data.Live || ev.data.Seq != seq {
			t.Fatalf("replay: %s, want event %d and no live text", ev.raw, seq)
		}
	}
}
