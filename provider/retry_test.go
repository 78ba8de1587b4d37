package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
)

func TestBackoffFullJitter(t *testing.T) {
	p := RetryPolicy{Rand: func() float64 { return 0.999999 }}.WithDefaults()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		got := p.Backoff(i + 1)
		if got > w || got < w-w/1000 {
			t.Errorf("backoff(%d) = %s, want just under %s", i+1, got, w)
		}
	}
	p.Rand = func() float64 { return 0 }
	if got := p.Backoff(3); got != 0 {
		t.Errorf("full jitter with rand 0 = %s, want 0", got)
	}
	p = RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: 250 * time.Millisecond, Rand: func() float64 { return 0.5 }}.WithDefaults()
	if got := p.Backoff(10); got != 125*time.Millisecond {
		t.Errorf("capped backoff = %s", got)
	}
	if p.MaxAttempts != 5 || p.MaxRetryAfter != 5*time.Minute {
		t.Errorf("defaults = %+v", p)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{}, 0, false},
		{http.Header{"Retry-After": {"2"}}, 2 * time.Second, true},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond, true},
		{http.Header{"Retry-After": {now.Add(time.Minute).Format(http.TimeFormat)}}, time.Minute, true},
		{http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After-Ms": {"junk"}, "Retry-After": {"9"}}, 9 * time.Second, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{"Retry-After": {"-3"}}, 0, false},
	} {
		got, ok := retryAfter(tc.h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%v) = %s, %v; want %s, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDefaultSleepHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep = %v", err)
	}
	if err := sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("sleep = %v", err)
	}
}

func TestStatusKind(t *testing.T) {
	for _, tc := range []struct {
		status    int
		typ       string
		kind      string
		retryable bool
	}{
		{429, "rate_limit_error", "rate_limited", true},
		{500, "", "server", true},
		{501, "", "server", true},
		{504, "", "server", true},
		{505, "", "server", false},
		{529, "", "overloaded", true},
		{500, "overloaded_error", "overloaded", true},
		{400, "", "bad_request", false},
		{401, "", "auth", false},
		{403, "", "auth", false},
		{404, "", "bad_request", false},
		{413, "", "bad_request", false},
	} {
		kind, retryable := StatusKind(tc.status, tc.typ)
		if string(kind) != tc.kind || retryable != tc.retryable {
			t.Errorf("StatusKind(%d, %q) = %s, %v", tc.status, tc.typ, kind, retryable)
		}
	}
}

func TestFailureOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want core.FailureKind
	}{
		{&Error{Kind: ErrOverloaded, Status: 529}, core.FailTransient},
		{&Error{Kind: ErrServer, Status: 500}, core.FailTransient},
		{&Error{Kind: ErrNetwork}, core.FailTransient},
		{&Error{Kind: ErrTruncated}, core.FailTransient},
		{&Error{Kind: ErrStalled, Message: "no bytes for 2m0s", Retryable: true}, core.FailTransient},
		{&Error{Kind: ErrAuth, Status: 401}, core.FailAuth},
		{&Error{Kind: ErrBadRequest, Status: 400, Message: "invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum"}, core.FailContext},
		{&Error{Kind: ErrBadRequest, Status: 400, Message: "This model's maximum context length is 128000 tokens"}, core.FailContext},
		{&Error{Kind: ErrBadRequest, Status: 400, Message: "invalid_request_error: messages: text content blocks must be non-empty"}, core.FailInvalid},
		{&Error{Kind: ErrBadRequest, Status: 408}, core.FailTransient},
		{fmt.Errorf("call: %w", &Error{Kind: ErrAuth, Status: 403}), core.FailAuth},
		{errors.New("something else"), core.FailTransient},
	} {
		if got := FailureOf(tc.err); got != tc.want {
			t.Errorf("FailureOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
