package vigil

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/postgres"
)

// manualClock is a Clock the test moves by hand.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c       *manualClock
	at      time.Time
	f       func()
	stopped bool
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// advance moves the clock by d and fires the timers due, in order.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*manualTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		go t.f()
	}
}

// outageProxy stands between vigil and PostgreSQL: while it is down it
// cuts every connection and refuses new ones, as a database that went away
// would.
type outageProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newOutageProxy(t *testing.T, target string) *outageProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			if !down {
				p.conns = append(p.conns, c)
			}
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *outageProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, s)
	p.mu.Unlock()
	go func() { io.Copy(s, c); s.Close() }()
	io.Copy(c, s)
	c.Close()
}

func (p *outageProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *outageProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cut()
	}
}

// While the store is unavailable every request gets ErrUnavailable (the
// server's 503 unavailable), never "no such session", "another node
// owns it" or an unclassified error; a session whose lease lapsed in the
// outage is taken back when the store answers. Before: creating a session
// with PostgreSQL down was a 500, a prompt after the lease lapsed a 404,
// and SQLite full after the lease lapsed a 409 naming no other node.
func TestOutageAnswers(t *testing.T) {
	sc, err := script.Parse([]byte("name: outage\nagents:\n  main:\n    turns:\n      - say: \"answered: {{.Input}}\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		open func(t *testing.T) (store.Store, func(down bool))
	}{
		{"postgres", func(t *testing.T) (store.Store, func(bool)) {
			dsn := pgtest.Fresh(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			p := newOutageProxy(t, u.Host)
			u.Host = p.ln.Addr().String()
			st, err := postgres.Open(context.Background(), u.String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, p.setDown
		}},
		{"full disk", func(t *testing.T) (store.Store, func(bool)) {
			st := memstore.New()
			return st, func(down bool) {
				if down {
					st.FailWrites(store.ErrFull)
				} else {
					st.FailWrites(nil)
				}
			}
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			st, setDown := b.open(t)
			clock := &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
			rt := openWith(t, st, sc, func(o *Options) { o.Clock, o.LeaseTTL = clock, 30*time.Second })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "before"})
			must(t, err)
			id := sess.ID
			must(t, rt.WaitQuiescent(ctx, id))
			a, err := rt.actor(string(id))
			must(t, err)

			setDown(true)
			_, err = rt.CreateSession(ctx, &SessionParams{Prompt: "during"})
			wantStoreDown(t, "creating a session in the outage", err)
			_, err = rt.Prompt(ctx, id, &PromptParams{Text: "during"})
			wantStoreDown(t, "a prompt in the outage", err)
			// The outage outlasts the lease: renewals fail until it lapses
			// and the session stops here.
			for range 4 {
				clock.advance(10 * time.Second)
			}
			select {
			case <-a.done:
			case <-ctx.Done():
				t.Fatal("the session did not stop after its lease lapsed")
			}
			_, err = rt.Prompt(ctx, id, &PromptParams{Text: "during, lease lapsed"})
			wantStoreDown(t, "a prompt after the lease lapsed", err)

			setDown(false)
			if _, err := rt.Prompt(ctx, id, &PromptParams{Text: "after"}); err != nil {
				t.Fatalf("a prompt once the store answers again: %v", err)
			}
			must(t, rt.WaitQuiescent(ctx, id))
			s, err := rt.State(ctx, id)
			must(t, err)
			if s.Agents[core.MainAgent].Runs[len(s.Agents[core.MainAgent].Runs)-1].Status != core.RunCompleted {
				t.Fatalf("the prompt after the outage did not complete")
			}
		})
	}
}

func wantStoreDown(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%s: %v; want ErrUnavailable (503 unavailable)", what, err)
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrMoved) {
		t.Fatalf("%s: %v also claims the session is gone or moved", what, err)
	}
}
