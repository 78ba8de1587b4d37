package server

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestUIWhy drives the web UI through a session whose model rounds the
// test holds open: the main agent's text streams onto the page before
// its round ends, then it waits for a permission answer while a
// subagent's round is in flight. The page must show a "needs you" badge
// in the sessions list (and filter by it), one "waiting on" line per
// agent as the server states it, the inbox items' content, timestamps and
// Markdown in the transcript, a 170-line output folded, actions in
// overflow menus with the destructive ones confirmed, and a phone layout
// in which nothing is wider than the screen. It saves screenshots of each.
func TestUIWhy(t *testing.T) {
	chromium := findChromium(t)
	out := artifactsDir(t)

	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fake := newGatedProvider()
	st := memstore.New()
	rt, err := vigil.Open(context.Background(), vigil.Options{
		Store: st, Providers: map[string]provider.Provider{"gated": fake}, DefaultProvider: "gated",
		DataDir: t.TempDir(), Node: "test", Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(rt, Options{Token: testToken, Logger: logger})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		fake.releaseAll() // no round outlives the test
		srv.Close()
		ts.Close()
		rt.Close()
		st.Close()
	})
	h := &harness{t: t, rt: rt, st: st, srv: srv, ts: ts}
	b := startBrowser(t, chromium, out, 90*time.Second)

	// A session that needs nobody: its one round ends at once.
	quick := h.create(CreateSessionRequest{Prompt: "Quick check of the docs", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	waitFor(t, b.ctx, "the quick session to end its run", func() bool {
		var d vigil.SessionDetail
		h.must("GET", "/api/sessions/"+quick, nil, http.StatusOK, &d)
		return len(d.Agents) == 1 && d.Agents[0].Runs == 1 && d.Agents[0].Run == nil
	})

	// The session under test, in mode ask: its shell command needs a person.
	id := h.create(CreateSessionRequest{Prompt: "Build the release", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}})
	b.do(chromedp.Navigate(ts.URL + "/#token=" + testToken))
	b.do(chromedp.Navigate(ts.URL + "/#/s/" + id))
	b.waitText("#session-head", "Build the release")
	b.waitText(`#conn[data-state="live"]`, "live")

	// Streaming: main's first round has sent its text and is held open.
	// The text is on the page, rendered as Markdown, while the round is in
	// flight and before the transcript holds it.
	fake.begin("main:1")
	fake.waitStreamed(t, b.ctx, "main:1")
	b.waitText(`#live-text[data-agent="main"]`, "ask for approval")
	b.waitText(`#live-text strong`, "release")
	b.waitText(`#live-text li`, "check the build")
	if got := b.eval(`document.querySelector("#transcript").innerText`); strings.Contains(got, "ask for approval") {
		t.Fatalf("the held round's text is in the committed transcript already:\n%s", got)
	}
	if fake.ended("main:1") {
		t.Fatal("main's first round ended before the test let it: the live text proves nothing")
	}
	b.waitText(`li.node[data-agent="main"] .node-live`, "ask for approval")
	// The agent's line gives the live text's last line as words, without
	// its Markdown marks ("- ask for approval").
	if got := b.eval(`document.querySelector('li.node[data-agent="main"] .node-live').textContent`); got != "“ask for approval”" {
		t.Errorf("main's live line %q, want “ask for approval”", got)
	}
	b.waitText(`li.node[data-agent="main"] .node-why`, whyText(t, h, id, "main"))
	b.screenshot("ui-streaming-laptop.png")

	// The round ends: its committed text replaces the live text.
	fake.release("main:1")
	b.waitText("#transcript .entry.assistant", "ask for approval")
	b.waitGone("#live-text")
	b.waitText("#transcript .entry.assistant li", "check the build")
	// Live text took no place in the event log: it stays contiguous.
	b.click("#event-log > summary")
	b.checkEventLog("model.ended")

	// Now main waits for a permission answer and the worker's round is in
	// flight: one "waiting on" line per agent, as the server states it, and
	// main's marked as needing a person.
	b.waitText(".b-approval", "seq 1 170")
	fake.waitStreamed(t, b.ctx, "worker:1")
	b.waitText(`li.node[data-agent="worker"]`, "worker")
	mainWhy := waitWhy(t, b.ctx, h, id, "main", "to need a person for its approval", func(w why) bool {
		return w.NeedsYou && strings.Contains(w.Text, "approval")
	})
	b.waitText(`li.node[data-agent="main"][data-needs-you="yes"] .node-why.needs`, mainWhy.Text)
	b.waitText(`li.node[data-agent="main"] .node-why .b-needs-you`, "needs you")
	workerWhy := waitWhy(t, b.ctx, h, id, "worker", "to say its round is in flight", func(w why) bool {
		return w.Text != "" && !w.NeedsYou
	})
	b.waitText(`li.node[data-agent="worker"][data-needs-you="no"] .node-why`, workerWhy.Text)
	b.waitText("#session-needs-you", "needs you")
	b.screenshot("ui-session-needs-you-laptop.png")
	// Every agent has its line.
	if n := b.eval(`String(document.querySelectorAll("li.node").length - document.querySelectorAll("li.node > .node-row .node-why").length)`); n != "0" {
		t.Fatalf("%s agents show no waiting-on line", n)
	}

	// The worker's round ends: its notification waits in main's inbox
	// (main's run waits for the answer), with its content.
	fake.release("worker:1")
	b.waitText(`.inbox[data-agent="main"] li.item[data-kind="notification"]`, "t1#1")
	itemText := inboxText(t, h, id, "main", "notification")
	if itemText == "" {
		t.Fatal("the queued notification has no text in the API")
	}
	b.waitText(`.inbox[data-agent="main"] li.item[data-kind="notification"] .item-text`, firstLine(itemText))

	// The sessions list: the session that waits for an approval carries a
	// "needs you" badge with the reason; the filter keeps only it.
	b.do(chromedp.Navigate(ts.URL + "/#/"))
	row := fmt.Sprintf(`a.session-row[data-session=%q]`, id)
	quickRow := fmt.Sprintf(`a.session-row[data-session=%q]`, quick)
	reasons := needsYouOf(t, h, id)
	if len(reasons) == 0 || !strings.Contains(strings.Join(reasons, " "), "approval") {
		t.Fatalf("the list's needs_you for a session waiting on an approval: %q", reasons)
	}
	if r := needsYouOf(t, h, quick); len(r) != 0 {
		t.Fatalf("the quick session needs nobody, yet: %q", r)
	}
	b.waitText(row+`[data-needs-you="yes"] .needs-you`, "needs you")
	b.waitText(row+" .needs-list", reasons[0])
	b.waitText(quickRow+`[data-needs-you="no"]`, "Quick check")
	if b.eval(fmt.Sprintf(`String(!!document.querySelector(%s))`, js(quickRow+" .needs-you"))) != "false" {
		t.Fatal("the quick session shows a needs-you badge")
	}
	b.waitText("#needs-you-filter .count", "1")
	b.screenshot("ui-sessions-needs-you-laptop.png")
	b.click("#needs-you-filter")
	b.waitGone(quickRow)
	b.waitText(row, "Build the release")
	if !strings.Contains(b.eval(`location.hash`), "needs_you=1") {
		t.Fatalf("the filter is not in the address: %s", b.eval(`location.hash`))
	}
	// On a phone the list fits, badge and reasons included.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.waitText(row+" .needs-you", "needs you")
	b.fitsScreen()
	b.screenshot("ui-sessions-phone-needs-you.png")
	b.do(chromedp.EmulateViewport(1280, 800))
	b.click("#needs-you-filter")
	b.waitText(quickRow, "Quick check")

	// Back on the session: answer the request; the 170-line output is
	// folded to its first and last lines, and opens on demand.
	b.click(row)
	b.waitText(".b-approval", "seq 1 170")
	b.click(".b-approval button.approve")
	b.waitGone(".b-approval")
	fold := `#transcript .entry.result .fold[data-lines="170"]`
	b.waitText(fold, "more lines")
	shown := b.eval(fmt.Sprintf(`document.querySelector(%s).innerText`, js(fold)))
	if !strings.Contains(shown, "\n170") || !strings.HasPrefix(shown, "1\n2\n") || strings.Contains(shown, "\n85\n") {
		t.Fatalf("the folded output does not show its first and last lines only:\n%s", shown)
	}
	b.click(fold + " button.fold-toggle")
	b.waitText(fold+`[data-open="yes"]`, "\n85\n")
	b.click(fold + " button.fold-toggle")
	b.waitText(fold+`[data-open="no"]`, "more lines")

	// Timestamps: every entry of the transcript shows when it was written.
	b.waitText("#transcript .entry.assistant", "the count is done")
	if n := b.eval(`String([...document.querySelectorAll("#transcript .entry")].filter((e) => !e.querySelector(".entry-head time.entry-time")).length)`); n != "0" {
		t.Fatalf("%s transcript entries have no timestamp", n)
	}
	at := b.eval(`document.querySelector("#transcript .entry time.entry-time").getAttribute("datetime")`)
	if ts, err := time.Parse(time.RFC3339Nano, at); err != nil || time.Since(ts) > time.Hour || time.Since(ts) < 0 {
		t.Fatalf("the first entry's timestamp %q is not the time it was written (%v)", at, err)
	}

	// Overflow menus: no destructive button in sight on an agent; Close
	// agent sits in its menu and asks first (answered no: nothing closes).
	worker := `li.node[data-agent="worker"]`
	if v := b.eval(fmt.Sprintf(`String([...document.querySelectorAll(%s)].filter((e) => e.getClientRects().length > 0).length)`, js(worker+" > .node-row button.danger, "+worker+" > .node-row .close-agent"))); v != "0" {
		t.Fatalf("%s destructive buttons in sight on the worker's row", v)
	}
	b.eval(`(window.__asked = [], window.confirm = (m) => (window.__asked.push(m), false), "")`)
	b.click(worker + ` details.menu[data-menu^="agent:"] > summary`)
	b.click(worker + " .close-agent")
	if asked := b.eval(`window.__asked.join("|")`); !strings.Contains(asked, "Close agent worker?") {
		t.Fatalf("closing an agent asked no confirmation: %q", asked)
	}
	b.waitGone(worker + " details.menu[open]")
	if st := agentState(t, h, id, "worker"); st == vigil.AgentClosed {
		t.Fatal("the worker was closed though the confirmation said no")
	}
	b.screenshot("ui-session-laptop-why.png")

	// A phone: nothing wider than the screen, no control cut off, the
	// session's actions on the title's line.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.waitText("#tree-card", "worker")
	b.fitsScreen()
	top := b.eval(`String(Math.abs(document.querySelector(".sh-actions").getBoundingClientRect().top - document.querySelector(".sh-title").getBoundingClientRect().top) < 4)`)
	if top != "true" {
		t.Fatal("on a phone the session's actions are not on the title's line")
	}
	b.click(`details.menu[data-menu="session"] > summary`)
	b.visible("#close-session")
	b.fitsScreen() // the open menu too
	b.click(`details.menu[data-menu="session"] > summary`)
	b.screenshot("ui-session-phone-why.png")
	b.noExceptions()
}

// why is an agent's "why" as the API sends it.
type why struct {
	Kind     string   `json:"kind"`
	Text     string   `json:"text"`
	NeedsYou bool     `json:"needs_you"`
	HoldsUp  []string `json:"holds_up"`
}

// whyOf reads the named agent's why from the API.
func whyOf(t *testing.T, h *harness, session, name string) why {
	t.Helper()
	var d struct {
		Agents []struct {
			Name string `json:"name"`
			Why  why    `json:"why"`
		} `json:"agents"`
	}
	h.must("GET", "/api/sessions/"+session, nil, http.StatusOK, &d)
	for _, a := range d.Agents {
		if a.Name == name {
			return a.Why
		}
	}
	t.Fatalf("no agent %s in session %s", name, session)
	return why{}
}

// waitWhy waits until the named agent's why satisfies ok, and returns it.
func waitWhy(t *testing.T, ctx context.Context, h *harness, session, name, what string, ok func(why) bool) why {
	t.Helper()
	var w why
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if w = whyOf(t, h, session, name); ok(w) {
			return w
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s's why %s: %v; it is %+v", name, what, ctx.Err(), w)
		case <-deadline:
			t.Fatalf("waiting for %s's why %s: it is %+v", name, what, w)
		case <-tick.C:
		}
	}
}

// whyText is the named agent's why text, which must be set.
func whyText(t *testing.T, h *harness, session, name string) string {
	t.Helper()
	w := whyOf(t, h, session, name)
	if w.Text == "" {
		t.Fatalf("the API gives %s no why text: %+v", name, w)
	}
	return w.Text
}

func agentState(t *testing.T, h *harness, session, name string) vigil.AgentState {
	t.Helper()
	var d vigil.SessionDetail
	h.must("GET", "/api/sessions/"+session, nil, http.StatusOK, &d)
	for _, a := range d.Agents {
		if a.Name == name {
			return a.State
		}
	}
	t.Fatalf("no agent %s in session %s", name, session)
	return ""
}

// inboxText is the text of the first item of kind in the agent's inbox.
func inboxText(t *testing.T, h *harness, session, name, kind string) string {
	t.Helper()
	var d vigil.SessionDetail
	h.must("GET", "/api/sessions/"+session, nil, http.StatusOK, &d)
	for _, a := range d.Agents {
		if a.Name != name {
			continue
		}
		for _, it := range a.Inbox {
			if string(it.Kind) == kind {
				return it.Text
			}
		}
	}
	t.Fatalf("no %s in %s's inbox", kind, name)
	return ""
}

// needsYouOf is the session's needs_you in the sessions list.
func needsYouOf(t *testing.T, h *harness, session string) []string {
	t.Helper()
	var l struct {
		Sessions []struct {
			ID       string   `json:"id"`
			NeedsYou []string `json:"needs_you"`
		} `json:"sessions"`
	}
	h.must("GET", "/api/sessions", nil, http.StatusOK, &l)
	for _, s := range l.Sessions {
		if s.ID == session {
			return s.NeedsYou
		}
	}
	t.Fatalf("session %s is not in the list", session)
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// waitFor polls cond until it holds; the test's deadline bounds it.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// startBrowser starts headless Chromium for a test and returns a browser
// whose actions the timeout bounds. Its cleanup runs before the test's
// earlier ones (the server's).
func startBrowser(t *testing.T, chromium, out string, timeout time.Duration) *browser {
	t.Helper()
	var chromeOut syncBuffer
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.CombinedOutput(&chromeOut),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(func(f string, a ...any) { t.Logf("chromedp: "+f, a...) }))
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v\n%s", chromium, err, chromeOut.String())
	}
	console := watchConsole(bctx)
	ctx, cancel := context.WithTimeout(bctx, timeout)
	b := &browser{t: t, ctx: ctx, root: bctx, out: out, console: console}
	t.Cleanup(func() {
		if t.Failed() {
			b.dump("failure-" + t.Name())
		}
		for _, m := range console.messages() {
			t.Logf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line+1)
		}
		cancel()
	})
	return b
}

// noExceptions fails the test for every uncaught exception in the page.
func (b *browser) noExceptions() {
	b.t.Helper()
	if b.console == nil {
		return
	}
	for _, m := range b.console.messages() {
		if m.IsException() {
			b.t.Errorf("uncaught exception in the page: %s", m.Text)
		}
	}
}

// fitsScreen checks that nothing on the page is wider than the screen:
// the page does not scroll sideways, no shown element's box reaches past
// either edge, no element clips or scrolls its content sideways, and no
// select cuts off the text of its choice.
func (b *browser) fitsScreen() {
	b.t.Helper()
	raw := b.eval(`(() => {
		const W = window.innerWidth, bad = [];
		const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.trim().split(/\s+/).join(".") : "");
		const de = document.documentElement;
		if (de.scrollWidth > de.clientWidth) bad.push("page: scrollWidth " + de.scrollWidth + " > clientWidth " + de.clientWidth);
		const ctx = document.createElement("canvas").getContext("2d");
		for (const e of document.querySelectorAll("body *")) {
			if (e.getClientRects().length === 0) continue;
			const cs = getComputedStyle(e);
			if (cs.visibility === "hidden") continue;
			const r = e.getBoundingClientRect();
			if (r.width === 0 && r.height === 0) continue;
			if (r.left < -1 || r.right > W + 1) bad.push(name(e) + ": box " + Math.round(r.left) + ".." + Math.round(r.right) + " of " + W);
			if (e.tagName === "SELECT") {
				ctx.font = cs.font;
				const text = e.selectedOptions[0] ? e.selectedOptions[0].textContent : "";
				const room = e.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 16;
				if (ctx.measureText(text).width > room) bad.push(name(e) + ": shows " + JSON.stringify(text) + " in " + Math.round(room) + "px");
			} else if (e.tagName !== "INPUT" && e.tagName !== "TEXTAREA" && cs.overflowX !== "visible" && e.scrollWidth > e.clientWidth + 1) {
				bad.push(name(e) + ": content " + e.scrollWidth + "px in " + e.clientWidth + "px");
			}
		}
		return JSON.stringify({W, n: document.querySelectorAll("body *").length, bad: bad.slice(0, 12)});
	})()`)
	var got struct {
		W   int      `json:"W"`
		N   int      `json:"n"`
		Bad []string `json:"bad"`
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		b.t.Fatalf("measure the page: %v: %s", err, raw)
	}
	if len(got.Bad) > 0 {
		b.screenshot("too-wide.png")
		b.t.Fatalf("at %d px wide, %d elements measured, some do not fit:\n%s", got.W, got.N, strings.Join(got.Bad, "\n"))
	}
	b.t.Logf("at %d px wide, %d elements all fit", got.W, got.N)
}

// gatedProvider plays the agents of TestUIWhy. A round is named
// "<agent>:<n>", n counting the agent's rounds from 1. The rounds the
// test holds stream their text, then wait until the test releases them.
type gatedProvider struct {
	mu       sync.Mutex
	waiting  map[string]chan struct{} // rounds that stream only once begun (begin)
	held     map[string]bool          // rounds held until released
	gates    map[string]chan struct{} // closed by release
	streamed map[string]chan struct{} // closed once the round's text is out
	done     map[string]bool          // rounds that ended
}

func newGatedProvider() *gatedProvider {
	return &gatedProvider{
		waiting:  map[string]chan struct{}{"main:1": make(chan struct{})},
		held:     map[string]bool{"main:1": true, "worker:1": true},
		gates:    map[string]chan struct{}{},
		streamed: map[string]chan struct{}{},
		done:     map[string]bool{},
	}
}

func (p *gatedProvider) chans(round string) (gate, streamed chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gates[round] == nil {
		p.gates[round] = make(chan struct{})
		p.streamed[round] = make(chan struct{})
	}
	return p.gates[round], p.streamed[round]
}

func (p *gatedProvider) release(round string) {
	gate, _ := p.chans(round)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[round] {
		p.held[round] = false
		close(gate)
	}
}

// begin lets a round that waits to stream (waiting) send its text:
// live text is not replayed, so the test first opens the page.
func (p *gatedProvider) begin(round string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.waiting[round]; c != nil {
		close(c)
		delete(p.waiting, round)
	}
}

func (p *gatedProvider) releaseAll() {
	p.mu.Lock()
	for r, c := range p.waiting {
		close(c)
		delete(p.waiting, r)
	}
	var rounds []string
	for r, h := range p.held {
		if h {
			rounds = append(rounds, r)
		}
	}
	p.mu.Unlock()
	for _, r := range rounds {
		p.release(r)
	}
}

func (p *gatedProvider) ended(round string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[round]
}

func (p *gatedProvider) waitStreamed(t *testing.T, ctx context.Context, round string) {
	t.Helper()
	_, streamed := p.chans(round)
	select {
	case <-streamed:
	case <-ctx.Done():
		t.Fatalf("round %s never streamed its text: %v", round, ctx.Err())
	}
}

// Name implements provider.Provider.
func (p *gatedProvider) Name() string { return "gated" }

// Stream implements provider.Provider.
func (p *gatedProvider) Stream(ctx context.Context, req *provider.Request) iter.Seq2[provider.Event, error] {
	return func(yield func(provider.Event, error) bool) {
		n := 1
		for _, m := range req.Messages {
			if m.Role == chat.RoleAssistant {
				n++
			}
		}
		round := fmt.Sprintf("%s:%d", req.AgentName, n)
		quick := strings.Contains(req.Messages[0].PlainText(), "Quick check")
		if quick {
			// The other session: answered at once, and not counted.
			round = "quick:" + round
		}
		parts, tools := p.answer(round)
		gate, streamed := p.chans(round)
		p.mu.Lock()
		begun := p.waiting[round]
		p.mu.Unlock()
		if begun != nil {
			select {
			case <-begun:
			case <-ctx.Done():
				yield(provider.Event{}, &provider.Error{Provider: "gated", Kind: provider.ErrCanceled, Message: ctx.Err().Error()})
				return
			}
		}
		for _, s := range parts {
			if !yield(provider.Event{Type: provider.EventText, Text: s}, nil) {
				return
			}
		}
		close(streamed)
		p.mu.Lock()
		held := p.held[round]
		p.mu.Unlock()
		if held {
			select {
			case <-gate:
			case <-ctx.Done():
				yield(provider.Event{}, &provider.Error{Provider: "gated", Kind: provider.ErrCanceled, Message: ctx.Err().Error()})
				return
			}
		}
		resp := &chat.Response{Content: []chat.Block{chat.Text(strings.Join(parts, ""))}, StopReason: chat.StopEndTurn,
			Usage: chat.Usage{InputTokens: 100, OutputTokens: 20}}
		if len(tools) > 0 {
			resp.Content = append(resp.Content, tools...)
			resp.StopReason = chat.StopToolUse
		}
		p.mu.Lock()
		p.done[round] = true
		p.mu.Unlock()
		yield(provider.Event{Type: provider.EventDone, Response: resp}, nil)
	}
}

// answer is what a round says, in the deltas it streams, and the tools it
// calls.
func (p *gatedProvider) answer(round string) ([]string, []chat.Block) {
	switch {
	case strings.HasPrefix(round, "quick:"):
		return []string{"The docs ", "are fine."}, nil
	case round == "main:1":
		tool := func(id, name, input string) chat.Block {
			return chat.Block{Type: chat.BlockToolUse, ID: id, Name: name, Input: json.RawMessage(input)}
		}
		return []string{"Looking at the **release** plan.\n\n", "- check the build\n", "- ask for approval\n"}, []chat.Block{
			tool("toolu_spawn", "Agent", `{"name":"worker","description":"builds the parts","prompt":"Build the parts","run_in_background":true}`),
			tool("toolu_count", "Bash", `{"command":"seq 1 170","description":"count to 170"}`),
		}
	case round == "worker:1":
		return []string{"Building ", "the parts…"}, nil
	case strings.HasPrefix(round, "main:"):
		return []string{"The worker runs; ", "the count is done."}, nil
	}
	return []string{"ok"}, nil
}
