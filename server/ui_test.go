package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestUI drives the web UI in Debian's Chromium: it starts a session from
// the form, watches a background subagent appear and finish, messages it,
// answers a permission request, stops a shell task, survives a dropped
// event stream, and saves screenshots at laptop and phone sizes. It asserts
// on what the page shows.
func TestUI(t *testing.T) {
	chromium := findChromium(t)
	out := artifactsDir(t)

	// The server: a runtime on memstore with the test's scenario, behind a
	// proxy that can drop and refuse the event streams.
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := os.ReadFile(filepath.Join("testdata", "ui.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := script.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	rt, err := vigil.Open(context.Background(), vigil.Options{
		Store: st, Providers: map[string]provider.Provider{"ui": script.New(sc, nil)}, DefaultProvider: "ui",
		DataDir: t.TempDir(), Node: "test", Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(rt, Options{Token: testToken, Logger: logger})
	backend := httptest.NewServer(srv)
	proxy := newDropProxy(t, backend.URL)
	front := httptest.NewServer(proxy)
	t.Cleanup(func() {
		srv.Close() // ends the event streams
		front.Close()
		backend.Close()
		rt.Close()
		st.Close()
	})
	h := &harness{t: t, rt: rt, st: st, srv: srv, ts: backend}

	// The browser. Its cleanup runs before the server's.
	profile := t.TempDir()
	var chromeOut syncBuffer
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
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
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	b := &browser{t: t, ctx: ctx, root: bctx, out: out}
	defer func() {
		if t.Failed() {
			b.dump("failure")
		}
		for _, m := range console.messages() {
			t.Logf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line+1)
		}
	}()

	// Without a token the page asks for one; a wrong one is refused.
	b.do(chromedp.Navigate(front.URL + "/"))
	b.waitText("main", "Connect to vigil")
	b.do(
		chromedp.SendKeys(chromedp.CSS("#token-input"), "not-the-token"),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	)
	b.waitText("main", "The server refused the token")

	// The token comes in the fragment, is kept and leaves the address bar.
	b.do(chromedp.Navigate(front.URL + "/#token=" + testToken))
	b.visible("#new-session")
	if loc := b.eval(`location.href`); strings.Contains(loc, testToken) {
		t.Fatalf("the token is still in the address bar: %s", loc)
	}
	if got := b.eval(`localStorage.getItem("vigil.token")`); got != testToken {
		t.Fatalf("the token was not kept: %q", got)
	}
	b.waitText("#sessions", "No sessions yet")

	// Start a session from the form, in permission mode ask: the shell task
	// needs an answer from the page.
	b.do(
		chromedp.SendKeys(chromedp.CSS(`#new-session textarea[name="prompt"]`), "Build the release"),
		chromedp.SetValue(chromedp.CSS(`#new-session select[name="mode"]`), "ask"),
		chromedp.Click(chromedp.CSS(`#new-session button[type="submit"]`)),
	)
	b.waitText("#session-head", "Build the release")
	b.waitText("#session-head", "permissions: ask")
	b.waitText("#transcript", "Build the release")

	// The background subagent appears and runs.
	b.waitText(`li.node[data-agent="worker"][data-state="running"]`, "worker")
	b.waitText(`li.node[data-agent="worker"]`, "does the slow part")
	workerID := b.eval(`document.querySelector('li.node[data-agent="worker"]').dataset.agentId`)

	// The shell task waits for permission: answer it from the banner.
	b.waitText(".b-approval", "Permission request")
	b.waitText(".b-approval", "sleep 30")
	// It says what "Allow always" would add, and what that grants.
	b.waitText(".b-approval .grants", "Allow always adds Bash(sleep 30")
	b.screenshot("ui-session-running-laptop.png")
	b.click(".b-approval button.approve-always")
	b.waitGone(".b-approval")
	// "Allow always" left a session rule for the same call.
	var d vigil.SessionDetail
	h.must("GET", "/api/sessions/"+b.eval(`location.hash.split("/")[2] || ""`), nil, 200, &d)
	if allow := d.Session.Permissions.Allow; len(allow) != 1 || !strings.HasPrefix(allow[0], "Bash(") || !strings.Contains(allow[0], "sleep 30") {
		t.Fatalf("rules after allow always: %q", allow)
	}
	b.waitText(`li.task[data-status="running"]`, "sleep 30")
	shellID := b.eval(`document.querySelector('li.task').dataset.task`)

	// The subagent finishes: idle in the tree, run 1 completed in the
	// history with its reply, and its notification in the main transcript.
	b.waitText(`li.node[data-agent="worker"][data-state="idle"]`, "idle")
	b.waitText(`li.run[data-agent="worker"][data-seq="1"][data-status="completed"]`, "the slow part is done")
	b.waitText("#transcript", "worker ended (completed): the slow part is done")

	// Its transcript on click.
	b.click(`li.node[data-agent="worker"] .node-row`)
	b.waitText("#transcript-agent", "worker")
	b.waitText("#transcript", "Do the slow part of: Build the release")
	b.click(`#transcript-card .card-head button`) // back to main
	b.waitText("#transcript-agent", "main")

	// Message the idle subagent: the page says what happened (rule 3).
	b.do(
		chromedp.SetValue(chromedp.CSS("#message-to"), workerID),
		chromedp.SendKeys(chromedp.CSS("#message-text"), "Please add tests too"),
		chromedp.Click(chromedp.CSS(`#message-form button[type="submit"]`)),
	)
	b.waitText(`#message-result .outcome[data-outcome="resumed"]`, "resumed")
	b.waitText("#message-result", "worker was idle; run 2 started with the message")
	b.waitText(`li.msg[data-outcome="resumed"]`, "Please add tests too")
	b.waitText(`li.run[data-agent="worker"][data-seq="2"][data-status="completed"]`, "worker answers: Please add tests too")

	// The shell task's output, then stop it.
	b.click(fmt.Sprintf(`li.task[data-task=%q] button.view-output`, shellID))
	b.waitText("#output-dialog", "Output of "+shellID)
	b.waitText("#output-dialog", "$ sleep 30")
	b.click("#output-close")
	b.waitGone("#output-dialog[open]")
	b.click(fmt.Sprintf(`li.task[data-task=%q] button.stop-task`, shellID))
	b.waitText(fmt.Sprintf(`li.task[data-task=%q][data-status="stopped"]`, shellID), "stopped")
	b.waitText("#transcript", "shell task "+shellID+"#exit ended (stopped)")

	// Drop the event stream and refuse reconnects for a while; meanwhile
	// hold the queue and queue a prompt behind the page's back. The page
	// must say it is reconnecting, then catch up from Last-Event-ID.
	b.waitText(`#conn[data-state="live"]`, "live")
	connects := proxy.streams()
	proxy.setBlocked(true)
	if n := proxy.cut(); n == 0 {
		t.Fatal("no event stream to drop")
	}
	b.waitText(`#conn[data-state="reconnecting"]`, "reconnecting…")
	h.must("POST", "/api/sessions/"+b.sessionID()+"/hold", HoldRequest{Reason: "paused by the browser test"}, http.StatusOK, nil)
	h.must("POST", "/api/sessions/"+b.sessionID()+"/prompts", PromptRequest{Text: "Ship it after the pause"}, http.StatusAccepted, nil)
	select {
	case <-proxy.refusedOne:
	case <-ctx.Done():
		t.Fatal("the page did not try to reconnect")
	}
	b.waitText(`#conn[data-state="reconnecting"]`, "retry in")
	proxy.setBlocked(false)
	b.waitText(`#conn[data-state="live"]`, "live")
	b.waitText("#hold-banner", "User queue held")
	b.waitText("#hold-banner", "paused by the browser test")
	b.waitText(`.inbox[data-agent="main"] .why.blocked`, "held by user")
	b.waitText(`.inbox[data-agent="main"] li.item[data-kind="prompt"]`, "Ship it after the pause")
	if proxy.streams() <= connects {
		t.Fatalf("the page did not reconnect: %d stream requests before the drop, %d after", connects, proxy.streams())
	}
	b.checkEventLog("hold.set", "item.enqueued")

	// Laptop screenshot while the queue is held, with the inbox reason.
	b.screenshot("ui-session-laptop.png")

	// Resume from the banner: the held prompt runs.
	b.click("#hold-banner button")
	b.waitGone("#hold-banner")
	b.waitText("#transcript", "Ship it after the pause")

	// Hold from the page, with a reason.
	b.click("#hold-toggle")
	b.do(chromedp.SendKeys(chromedp.CSS("#hold-reason-input"), "held from the page"))
	b.click("#hold-submit")
	b.waitText("#hold-banner", "held from the page")
	b.waitGone("#hold-form")

	// A phone: one column, no horizontal scrolling.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	b.waitText("#tree-card", "worker")
	b.noHorizontalScroll()
	b.screenshot("ui-session-phone.png")

	// The sessions list shows the session with its live state.
	b.do(chromedp.Navigate(front.URL + "/#/"))
	b.waitText(fmt.Sprintf(`a.session-row[data-session=%q]`, b.sessionID()), "Build the release")
	b.waitText(fmt.Sprintf(`a.session-row[data-session=%q]`, b.sessionID()), "agents running")
	b.noHorizontalScroll()
	b.screenshot("ui-sessions-phone.png")
	b.do(chromedp.EmulateViewport(1280, 800))
	b.screenshot("ui-sessions-laptop.png")

	// Close the session from its page (the confirmation answered yes).
	b.click(fmt.Sprintf(`a.session-row[data-session=%q]`, b.sessionID()))
	b.waitText("#session-head", "Build the release")
	b.eval(`(window.confirm = () => true, "")`)
	b.click(`details.menu[data-menu="session"] > summary`)
	b.click("#close-session")
	b.waitText("#closed-banner", "Session closed")
	b.waitText("#session-head", "closed")
	b.waitGone("#close-session")

	for _, m := range console.messages() {
		if m.IsException() {
			t.Errorf("uncaught exception in the page: %s", m.Text)
		}
	}
}

// findChromium returns the path of Chromium, or skips the test loudly
// (fails it under VIGIL_TEST_STRICT=1).
func findChromium(t *testing.T) string {
	t.Helper()
	cands := []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"}
	if p := os.Getenv("VIGIL_CHROMIUM"); p != "" {
		cands = []string{p}
	}
	for _, p := range cands {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := fmt.Sprintf("SKIP: chromium not found; run .ci/chromium.sh (looked at %s; set VIGIL_CHROMIUM to another path)", strings.Join(cands, ", "))
	if os.Getenv("VIGIL_TEST_STRICT") == "1" {
		t.Fatal(msg + " — VIGIL_TEST_STRICT=1 forbids skipping")
	}
	fmt.Fprintf(os.Stderr, "\n%s\n!!! %s\n%s\n\n", strings.Repeat("!", 78), msg, strings.Repeat("!", 78))
	t.Skip(msg)
	return ""
}

// artifactsDir is where screenshots go: $VIGIL_ARTIFACTS, else .ci/out
// at the module's root, which CI keeps as artifacts (its .gitignore keeps
// the images out of git).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VIGIL_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", ".ci", "out")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		t.Fatal(err)
	}
	return abs
}

// browser runs actions against the page and fails the test with what the
// page showed.
type browser struct {
	t       *testing.T
	ctx     context.Context
	root    context.Context // the browser's context, without the test's deadline
	out     string
	session string
	console *consoleLog // what the page logged, when watched
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// poll waits until the JavaScript predicate holds.
func (b *browser) poll(what, predicate string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second)))
	if err != nil {
		b.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, b.pageText())
	}
}

func (b *browser) visible(sel string) {
	b.t.Helper()
	b.poll(sel+" visible", fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.getClientRects().length > 0; })()`, js(sel)))
}

// waitText waits until an element matching sel is shown and its text (as
// rendered: innerText) contains want.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	b.poll(fmt.Sprintf("%s showing %q", sel, want), fmt.Sprintf(
		`[...document.querySelectorAll(%s)].some((e) => e.getClientRects().length > 0 && e.innerText.includes(%s))`, js(sel), js(want)))
}

func (b *browser) waitGone(sel string) {
	b.t.Helper()
	b.poll(sel+" gone", fmt.Sprintf(`![...document.querySelectorAll(%s)].some((e) => e.getClientRects().length > 0)`, js(sel)))
}

// click clicks the first shown, enabled element matching sel, in one step
// in the page: the live page re-renders often, and a node found in one
// protocol call can be replaced before the next.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.poll("click "+sel, fmt.Sprintf(`(() => {
		const e = [...document.querySelectorAll(%s)].find((e) => e.getClientRects().length > 0 && !e.disabled);
		if (!e) return false;
		e.scrollIntoView({block: "center"});
		e.click();
		return true;
	})()`, js(sel)))
}

func (b *browser) sessionID() string {
	b.t.Helper()
	if b.session == "" {
		b.session = b.eval(`decodeURIComponent(location.hash.split("/")[2] || "")`)
		if b.session == "" {
			b.t.Fatal("the page is not on a session")
		}
	}
	return b.session
}

func (b *browser) pageText() string {
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(cannot read the page: " + err.Error() + ")"
	}
	return v
}

// noHorizontalScroll checks that the page fits the viewport's width.
func (b *browser) noHorizontalScroll() {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	if err != nil {
		b.t.Fatal(err)
	}
	if len(v) != 2 || v[0] > v[1] {
		wide := b.eval(`[...document.querySelectorAll("body *")].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map((e) => e.tagName + "." + e.className + "#" + e.id).join(", ")`)
		b.t.Fatalf("the page scrolls sideways: scrollWidth %d > width %d; too wide: %s", v[0], v[1], wide)
	}
}

// checkEventLog checks that the event log shows the session's events in
// order with no gap and none twice, and shows each of the types.
func (b *browser) checkEventLog(types ...string) {
	b.t.Helper()
	var entries []struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
	}
	raw := b.eval(`JSON.stringify([...document.querySelectorAll("#events li")].map((e) => ({seq: Number(e.dataset.seq), type: e.dataset.type})))`)
	if err := json.Unmarshal([]byte(raw), &entries); err != nil {
		b.t.Fatal(err)
	}
	if len(entries) < 2 {
		b.t.Fatalf("event log has %d entries", len(entries))
	}
	seen := map[string]bool{}
	// Newest first.
	for i, e := range entries {
		seen[e.Type] = true
		if i > 0 && entries[i-1].Seq != e.Seq+1 {
			b.t.Fatalf("event log: #%d after #%d: a gap or a duplicate", entries[i-1].Seq, e.Seq)
		}
	}
	for _, typ := range types {
		if !seen[typ] {
			b.t.Fatalf("event log shows no %s event", typ)
		}
	}
	b.t.Logf("event log: %d events, #%d to #%d, contiguous", len(entries), entries[len(entries)-1].Seq, entries[0].Seq)
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(b.out, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// dump saves a screenshot and the text of the page after a failure.
func (b *browser) dump(name string) {
	ctx, cancel := context.WithTimeout(b.root, 10*time.Second)
	defer cancel()
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		path := filepath.Join(b.out, name+".png")
		if os.WriteFile(path, png, 0o644) == nil {
			b.t.Logf("failure screenshot: %s", path)
		}
	}
	if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`)); err == nil {
		path := filepath.Join(b.out, name+".txt")
		if os.WriteFile(path, []byte(text), 0o644) == nil {
			b.t.Logf("failure page text: %s", path)
		}
	}
}

// dropProxy forwards the browser's requests to the server. It can cut the
// event streams in flight and refuse new ones, as a flaky network would.
type dropProxy struct {
	rp *httputil.ReverseProxy

	// refusedOne is closed when the first stream is refused.
	refusedOne chan struct{}

	mu      sync.Mutex
	blocked bool
	live    map[int]context.CancelFunc
	next    int
	opened  int
	refused int
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // stream events as they come
	rp.ErrorLog = log.New(tWriter{t}, "proxy: ", 0)
	return &dropProxy{rp: rp, live: map[int]context.CancelFunc{}, refusedOne: make(chan struct{})}
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/events") {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	if p.blocked {
		p.refused++
		if p.refused == 1 {
			close(p.refusedOne)
		}
		p.mu.Unlock()
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: "the test proxy refuses event streams"})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	id := p.next
	p.next++
	p.opened++
	p.live[id] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.live, id)
		p.mu.Unlock()
		cancel()
	}()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// cut drops every event stream in flight and returns how many.
func (p *dropProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c()
	}
	return len(p.live)
}

func (p *dropProxy) setBlocked(v bool) {
	p.mu.Lock()
	p.blocked = v
	p.mu.Unlock()
}

// streams is how many event streams the proxy has opened.
func (p *dropProxy) streams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened
}

// consoleLog collects what the page writes to its console.
type consoleLog struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func watchConsole(ctx context.Context) *consoleLog {
	c := &consoleLog{}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *consoleLog) messages() []chromedp.ConsoleMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), c.msgs...)
}

// syncBuffer is a strings.Builder safe for the browser's output goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
