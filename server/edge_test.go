package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
)

// checkJSONError fails unless resp is a JSON error with status and code;
// it returns the message.
func checkJSONError(t *testing.T, what string, resp *http.Response, status int, code string) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("%s: %d %s %q: not a JSON error", what, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		return ""
	}
	if resp.StatusCode != status || e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("%s: %d %s (%s), want %d %s", what, resp.StatusCode, e.Error.Code, e.Error.Message, status, code)
	}
	return e.Error.Message
}

// TestHostCheck: every route, public ones included, refuses a Host that is
// not a loopback name, the server's own address or an allowed name (DNS
// rebinding), with a JSON 403 that says how to allow it.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *Options) { o.AllowedHosts = []string{"vigil.example", "Proxy.Example:8443"} })
	do := func(path, host, token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", h.ts.URL+path, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, path := range []string{"/healthz", "/", "/ui/app.js", "/api/sessions", "/api/events", "/mcp", "/api/nope"} {
		for _, host := range []string{"evil.example", "evil.example:7777", "127.0.0.1.evil.example", "localhost.evil.example", "vigil.example.evil", "proxy.example:9999", "10.1.2.3:7777"} {
			msg := checkJSONError(t, "GET "+path+" Host "+host, do(path, host, testToken), http.StatusForbidden, "host_not_allowed")
			if msg != "" && (!strings.Contains(msg, host) || !strings.Contains(msg, "--allow-host")) {
				t.Errorf("Host %s: the message does not name the host and how to allow it: %s", host, msg)
			}
		}
	}
	_, port, _ := net.SplitHostPort(h.ts.Listener.Addr().String())
	for _, host := range []string{"localhost", "LOCALHOST:7777", "localhost.", "127.0.0.1", "127.0.0.1:" + port, "127.9.9.9:80", "[::1]", "[::1]:7777", "vigil.example", "VIGIL.example:1", "proxy.example:8443"} {
		resp := do("/healthz", host, "")
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d, want 200", host, resp.StatusCode)
		}
	}
	// "*" allows any Host.
	any := newHarness(t, func(o *Options) { o.AllowedHosts = []string{"*"} })
	req, _ := http.NewRequest("GET", any.ts.URL+"/healthz", nil)
	req.Host = "evil.example"
	resp, err := any.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("AllowedHosts *: %d", resp.StatusCode)
	}
}

// TestHostCheckOwnAddress: a server listening on every interface answers
// to the address a client reached it on (no DNS name is involved, so no
// rebinding), and to nothing else.
func TestHostCheckOwnAddress(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	srv := New(h.rt, Options{Token: testToken})
	r, _ := http.NewRequest("GET", "/healthz", nil)
	r.Host = "192.168.7.9:7777"
	r = r.WithContext(contextWithLocalAddr(r, &net.TCPAddr{IP: net.ParseIP("192.168.7.9"), Port: 7777}))
	if e := srv.checkHost(r); e != nil {
		t.Errorf("own address refused: %v", e)
	}
	r.Host = "192.168.7.10:7777"
	if e := srv.checkHost(r); e == nil {
		t.Error("another address accepted")
	}
}

// TestAuthSchemeCaseInsensitive: "bearer", "BEARER" and extra spaces are
// the same scheme; other schemes and a missing token are refused.
func TestAuthSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, auth := range []string{"Bearer " + testToken, "bearer " + testToken, "BEARER " + testToken, "bEaReR  " + testToken + " ", " Bearer " + testToken} {
		req, _ := http.NewRequest("GET", h.ts.URL+"/api/sessions", nil)
		req.Header.Set("Authorization", auth)
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("Authorization %q: %d, want 200", auth, resp.StatusCode)
		}
	}
	for _, auth := range []string{"Basic " + testToken, "Bearer" + testToken, "Bearer", "Bearer ", testToken, "Token " + testToken} {
		req, _ := http.NewRequest("GET", h.ts.URL+"/api/sessions", nil)
		req.Header.Set("Authorization", auth)
		resp, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		checkJSONError(t, fmt.Sprintf("Authorization %q", auth), resp, http.StatusUnauthorized, "unauthorized")
	}
}

// TestJSONErrorsEverywhere sends what the mux and the file server would
// answer in text or HTML: unknown paths, wrong methods, paths that need
// cleaning, encoded dots and slashes, missing UI files. Every answer is
// JSON; a wrong method names the allowed ones.
func TestJSONErrorsEverywhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	addr := h.ts.Listener.Addr().String()
	for _, c := range []struct {
		method, target string
		token          bool
		status         int
		code           string
	}{
		{"GET", "/api/nope", true, 404, "not_found"},
		{"GET", "/nope", false, 401, "unauthorized"},
		{"GET", "/ui/nope.js", false, 404, "not_found"},
		{"GET", "/ui/no/such/dir/", false, 404, "not_found"},
		{"GET", "/ui", false, 307, "redirect"},
		{"PUT", "/api/sessions", true, 405, "method_not_allowed"},
		{"DELETE", "/healthz", true, 405, "method_not_allowed"},
		{"POST", "/api/sessions/" + id + "/status", true, 405, "method_not_allowed"},
		{"GET", "//api/sessions", true, 400, "invalid"},
		{"GET", "/api/../api/sessions", true, 400, "invalid"},
		{"GET", "/api/./sessions", true, 400, "invalid"},
		{"GET", "//healthz", false, 400, "invalid"},
		{"GET", "/ui/../healthz", false, 400, "invalid"},
		{"GET", "/ui/%2e%2e/healthz", false, 400, "invalid"},
		{"GET", "/api/sessions/%2e%2e", true, 400, "invalid"},
		{"GET", "/api/sessions/%2E", true, 400, "invalid"},
		{"GET", "/api/sessions/" + id + "%2Fstatus", true, 400, "invalid"},
		{"GET", "/api/sessions/" + id + "/agents/a%2fb", true, 400, "invalid"},
		{"GET", "/api/sessions/%00", true, 400, "invalid"},
		{"GET", "/api/sessions/%ff", true, 400, "invalid"},
		{"GET", "/api/sessions/" + id + "/agents/%00main", true, 400, "invalid"},
		{"GET", "/api/sessions?owner=%00", true, 400, "invalid"},
		{"GET", "/api/sessions?owner=%ff", true, 400, "invalid"},
		{"GET", "/api/sessions?owner=%zz", true, 400, "invalid"},
		{"GET", "/api/sessions/nope", true, 404, "not_found"},
		{"GET", "http://127.0.0.1/api/nope", true, 404, "not_found"},
	} {
		rc := dialRaw(t, addr)
		auth := ""
		if c.token {
			auth = "Authorization: Bearer " + testToken + "\r\n"
		}
		rc.send(c.method + " " + c.target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Length: 0\r\n\r\n")
		resp, err := rc.response(&http.Request{Method: c.method})
		if err != nil {
			t.Errorf("%s %s: %v", c.method, c.target, err)
			continue
		}
		what := c.method + " " + c.target
		checkJSONError(t, what, resp, c.status, c.code)
		if c.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", what)
		}
		if c.status == 307 && resp.Header.Get("Location") != "/ui/" {
			t.Errorf("%s: Location %q", what, resp.Header.Get("Location"))
		}
	}
	// The messages say what is wrong.
	rc := dialRaw(t, addr)
	rc.send("GET /api/sessions/" + id + "/agents/a%00b HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\n\r\n")
	resp, err := rc.response(&http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if msg := checkJSONError(t, "NUL in {agent}", resp, 400, "invalid"); msg != "{agent}: contains a NUL byte at offset 1" {
		t.Errorf("NUL in {agent}: message %q", msg)
	}
}

// countingListener counts the bytes read from its connections.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// TestAuthBeforeBody: a request without the token, the wrong Host or an
// unknown path is refused from its headers: the server answers at once,
// closes the connection and reads none of the body, whether it announces
// 1 GiB or 200 kB (under what net/http would read to reuse the connection)
// and sends 150 kB of it.
func TestAuthBeforeBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var read atomic.Int64
	s := h.serve(func(ln net.Listener) net.Listener { return countingListener{Listener: ln, read: &read} })
	body := strings.Repeat("x", 150_000)
	for _, c := range []struct {
		name, head string
		status     int
		code       string
	}{
		{"no token", "POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n", 401, "unauthorized"},
		{"wrong token", "POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer nope\r\n", 401, "unauthorized"},
		{"no token, unknown path", "POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\n", 401, "unauthorized"},
		{"no token, MCP", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", 401, "unauthorized"},
		{"wrong host", "POST /api/sessions HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " + testToken + "\r\n", 403, "host_not_allowed"},
		{"bad path", "POST //api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\n", 400, "invalid"},
	} {
		for _, length := range []int{1 << 30, 200_000} {
			name := fmt.Sprintf("%s, Content-Length %d", c.name, length)
			before := read.Load()
			rc := dialRaw(t, s.addr)
			rc.send(c.head + fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", length))
			go func() { _, _ = rc.c.Write([]byte(body)) }() // fails once the server closes
			resp, err := rc.response(&http.Request{Method: "POST"})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !resp.Close {
				t.Errorf("%s: the response does not close the connection", name)
			}
			checkJSONError(t, name, resp, c.status, c.code)
			if !rc.closedByServer() {
				t.Errorf("%s: the server kept the connection", name)
			}
			// The server reads the headers in blocks of 4 KiB, with what
			// came in the same read: never the body.
			if n := read.Load() - before; n > 16<<10 {
				t.Errorf("%s: the server read %d bytes", name, n)
			}
		}
	}
}

// TestSlowBodyCut: a request with the token whose body never finishes is
// answered 408 once Options.ReadTimeout passes, and its connection closed;
// so are headers that never finish (ReadHeaderTimeout).
func TestSlowBodyCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.serve(nil, func(o *Options) { o.ReadTimeout = 100 * time.Millisecond; o.ReadHeaderTimeout = 100 * time.Millisecond })
	id := h.create(CreateSessionRequest{Provider: "echo"})
	rc := dialRaw(t, s.addr)
	rc.send("POST /api/sessions/" + id + "/prompts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\nContent-Length: 100\r\n\r\n{\"text\": \"")
	resp, err := rc.response(&http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	checkJSONError(t, "slow body", resp, http.StatusRequestTimeout, "timeout")
	if !rc.closedByServer() {
		t.Error("the server kept the connection of a slow body")
	}
	rc = dialRaw(t, s.addr)
	rc.send("GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	if !rc.closedByServer() {
		t.Error("the server kept a connection whose headers never ended")
	}
	// The server is fine.
	rc = dialRaw(t, s.addr)
	rc.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, err = rc.response(&http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestBadText: NUL bytes, invalid UTF-8 and unpaired surrogates in any
// text of a request are refused with a 400 naming the field; a relative
// working directory is refused. The session goes on.
func TestBadText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.create(CreateSessionRequest{Provider: "echo"})
	base := "/api/sessions/" + id
	for _, c := range []struct {
		path, body, want string
	}{
		{base + "/prompts", `{"text":"a\u0000b"}`, "text: contains a NUL byte at offset 1"},
		{base + "/prompts", "{\"text\":\"ab\xffc\"}", "text: invalid UTF-8 at offset 2"},
		{base + "/prompts", `{"text":"é\ud800"}`, `text: an unpaired UTF-16 surrogate (\ud800) at offset 2`},
		{base + "/prompts", `{"text":"\udc00"}`, `text: an unpaired UTF-16 surrogate (\udc00) at offset 0`},
		{base + "/prompts", `{"text":"ok","priority":"n\u0000"}`, "priority: contains a NUL byte at offset 1"},
		{base + "/agents/main/messages", `{"text":"\u0000"}`, "text: contains a NUL byte at offset 0"},
		{base + "/hold", `{"reason":"x\u0000"}`, "reason: contains a NUL byte at offset 1"},
		{base + "/budget", `{"agent":"\u0000"}`, "agent: contains a NUL byte at offset 0"},
		{base + "/approvals/p1", `{"allow":false,"reason":"\u0000"}`, "reason: contains a NUL byte at offset 0"},
		{"/api/sessions", `{"title":"t\u0000"}`, "title: contains a NUL byte at offset 1"},
		{"/api/sessions", `{"prompt":"p","cwd":"/tmp\u0000"}`, "cwd: contains a NUL byte at offset 4"},
		{"/api/sessions", `{"dirs":["/tmp","/\u0000"]}`, "dirs[1]: contains a NUL byte at offset 1"},
		{"/api/sessions", `{"permissions":{"mode":"auto","allow":["Bash(ls)","Bash(\u0000)"]}}`, "permissions.allow[1]: contains a NUL byte at offset 5"},
		{"/api/sessions", `{"budget":{"agent":"\u0000"}}`, "budget.agent: contains a NUL byte at offset 0"},
		{"/api/sessions", `{"cwd":"relative/dir"}`, `cwd must be absolute: "relative/dir"`},
		{"/api/sessions", `{"cwd":"../.."}`, `cwd must be absolute: "../.."`},
		{"/api/sessions", `{"cwd":"/tmp","dirs":["x"]}`, `dirs[0] must be absolute: "x"`},
		{"/api/sessions", `{"budget":{"cost_usd":1e308}}`, "budget.cost_usd=1e+308: want 0 (no bound) to 1e+09"},
		{base + "/budget", `{"wall_seconds":9223372036854775807}`, "wall_seconds=9223372036854775807: want 0 (no bound) to 3153600000"},
		{base + "/budget", `{"tokens":-1}`, "tokens=-1: want 0 (no bound) or more"},
	} {
		e := h.mustErr("POST", c.path, c.body, 400, "invalid")
		if e.Message != c.want {
			t.Errorf("POST %s %q: message %q, want %q", c.path, c.body, e.Message, c.want)
		}
	}
	// A surrogate pair is one character, and fine.
	h.must("POST", base+"/prompts", `{"text":"\ud83d\ude00 ok"}`, http.StatusAccepted, nil)
	h.quiet(id)
	var d vigil.SessionDetail
	h.must("GET", base, nil, 200, &d)
	if len(d.Agents) == 0 || d.Agents[0].Runs != 1 {
		t.Fatalf("the session did not go on: %+v", d.Agents)
	}
	var ad vigil.AgentDetail
	h.must("GET", base+"/agents/main", nil, 200, &ad)
	if r := ad.RunHistory[0].Reply; r != "echo: \U0001F600 ok" {
		t.Errorf("reply %q", r)
	}
	// An absolute cwd is taken as it is.
	dir := t.TempDir()
	h.must("POST", "/api/sessions", CreateSessionRequest{Cwd: dir + "/.", Permissions: &vigil.Permissions{Mode: vigil.PermAsk}}, http.StatusCreated, &d)
	if d.Session.Cwd != dir {
		t.Errorf("cwd %q, want %q", d.Session.Cwd, dir)
	}
}

// contextWithLocalAddr is r's context with the local address net/http
// gives a request.
func contextWithLocalAddr(r *http.Request, a net.Addr) context.Context {
	return context.WithValue(r.Context(), http.LocalAddrContextKey, a)
}
