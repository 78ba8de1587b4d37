package provider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// trickle is a response body that hands out its chunks, waiting gaps[i]
// before chunk i, and then blocks until the request's context ends, as a
// dead connection does.
type trickle struct {
	ctx    context.Context
	chunks []string
	gaps   []time.Duration
	closed bool
}

func (b *trickle) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		<-b.ctx.Done()
		return 0, b.ctx.Err()
	}
	if len(b.gaps) > 0 {
		t := time.NewTimer(b.gaps[0])
		b.gaps = b.gaps[1:]
		select {
		case <-t.C:
		case <-b.ctx.Done():
			t.Stop()
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.chunks[0])
	b.chunks = b.chunks[1:]
	return n, nil
}

func (b *trickle) Close() error { b.closed = true; return nil }

// roundTripFunc is an in-memory transport: real sockets do not work in a
// synctest bubble.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestStallTransportBodyGoesQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var body *trickle
		rt := StallTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			// Bytes at 0s, 100s and 200s: each read restarts the timer, so
			// the stall comes 120s after the last one, at 320s.
			body = &trickle{ctx: r.Context(), chunks: []string{"a", "b", "c"}, gaps: []time.Duration{0, 100 * time.Second, 100 * time.Second}}
			return &http.Response{StatusCode: 200, Body: body, Header: http.Header{}}, nil
		}), 120*time.Second)
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, "http://fake/", nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		var se *StallError
		if !errors.As(err, &se) || se.Timeout != 120*time.Second || err.Error() != "no bytes for 2m0s" {
			t.Fatalf("read error = %v (%T), want a StallError of 2m0s", err, err)
		}
		if string(got) != "abc" {
			t.Errorf("read %q before the stall, want abc", got)
		}
		if d := time.Since(start); d != 320*time.Second {
			t.Errorf("stalled after %s, want 5m20s (120s after the last byte)", d)
		}
		res.Body.Close()
		if !body.closed {
			t.Error("the underlying body was not closed")
		}
	})
}

func TestStallTransportNoHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := StallTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}), time.Minute)
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, "http://fake/", nil)
		_, err := rt.RoundTrip(req)
		var se *StallError
		if !errors.As(err, &se) || se.Timeout != time.Minute {
			t.Fatalf("error = %v (%T), want a StallError", err, err)
		}
		if d := time.Since(start); d != time.Minute {
			t.Errorf("gave up after %s, want 1m0s", d)
		}
	})
}

func TestStallTransportLeavesHealthyAndCanceledRequestsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := StallTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("whole body")), Header: http.Header{}}, nil
		}), time.Second)
		req, _ := http.NewRequest(http.MethodGet, "http://fake/", nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // long after the timeout: the body is already here
		b, err := io.ReadAll(res.Body)
		if err != nil || string(b) != "whole body" {
			t.Errorf("read %q, %v", b, err)
		}
		res.Body.Close()
		time.Sleep(time.Hour) // the timer is stopped: nothing fires

		// The caller's cancel is not a stall.
		ctx, cancel := context.WithCancel(context.Background())
		rt = StallTransport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: &trickle{ctx: r.Context()}, Header: http.Header{}}, nil
		}), time.Minute)
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://fake/", nil)
		res, err = rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(time.Second); cancel() }()
		_, err = io.ReadAll(res.Body)
		var se *StallError
		if errors.As(err, &se) || !errors.Is(err, context.Canceled) {
			t.Errorf("error after the caller cancelled = %v, want context.Canceled", err)
		}
		res.Body.Close()
	})
}

func TestStallClient(t *testing.T) {
	base := &http.Client{Timeout: time.Hour}
	if c := (RetryPolicy{StallTimeout: -1}).StallClient(base); c != base {
		t.Error("a negative StallTimeout must leave the client alone")
	}
	c := (RetryPolicy{}).StallClient(base)
	st, ok := c.Transport.(*stallTransport)
	if c == base || !ok || st.timeout != DefaultStallTimeout || st.base != http.DefaultTransport || c.Timeout != time.Hour {
		t.Errorf("client = %+v, transport %+v", c, c.Transport)
	}
	if base.Transport != nil {
		t.Error("StallClient changed the client it was given")
	}
	if p := (RetryPolicy{}).WithDefaults(); p.StallTimeout != 2*time.Minute {
		t.Errorf("default StallTimeout = %s", p.StallTimeout)
	}
	if p := (RetryPolicy{StallTimeout: -1}).WithDefaults(); p.StallTimeout != -1 {
		t.Errorf("WithDefaults turned a negative StallTimeout into %s", p.StallTimeout)
	}
	if rt := StallTransport(nil, 0); rt != http.DefaultTransport {
		t.Errorf("StallTransport with no timeout = %T", rt)
	}
}

func TestIdentityHeaders(t *testing.T) {
	kv := func(k, v string) string { return k + "=" + v }
	got := IdentityHeaders(&Request{Session: "s1", AgentName: "main", CallID: "c1"}, kv)
	if strings.Join(got, " ") != "X-Vigil-Session=s1 X-Vigil-Agent=main X-Vigil-Call=c1" {
		t.Errorf("normal round headers = %v", got)
	}
	got = IdentityHeaders(&Request{AgentName: "main", Purpose: PurposeCompact}, kv)
	if strings.Join(got, " ") != "X-Vigil-Agent=main X-Vigil-Purpose=compact" {
		t.Errorf("compaction headers = %v", got)
	}
}
