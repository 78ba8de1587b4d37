package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
)

// fuzzEnv is a server over one store with the sessions the fuzz target
// sends its bytes to.
type fuzzEnv struct {
	name    string
	h       *harness
	session string // takes every route but the closing ones
	scratch string // takes the closing ones
}

func newFuzzEnv(f *testing.F, name string, h *harness) *fuzzEnv {
	e := &fuzzEnv{name: name, h: h}
	e.session = h.create(CreateSessionRequest{Provider: "echo", Permissions: &vigil.Permissions{Mode: vigil.PermBypass}})
	e.scratch = h.create(CreateSessionRequest{Provider: "echo"})
	h.quiet(e.session)
	return e
}

// do sends one request with the token and returns the status and body.
func (e *fuzzEnv) do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.h.ts.URL+path, r)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", e.name, method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.h.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", e.name, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %s %s: read the answer: %v", e.name, method, path, err)
	}
	return resp.StatusCode, b
}

// run sends data as the body of every POST route, as a path parameter and
// as a query value; none may answer 5xx. Then the session must take a
// normal prompt and answer it: bad input cannot jam it.
func (e *fuzzEnv) run(t *testing.T, data []byte) {
	sess := "/api/sessions/" + e.session
	scratch := "/api/sessions/" + e.scratch
	posts := []string{
		"/api/sessions",
		sess + "/hold", sess + "/resume", sess + "/prompts", sess + "/budget",
		sess + "/agents/main/messages", sess + "/agents/main/cancel", sess + "/agents/main/retry",
		sess + "/tasks/t1/stop", sess + "/inbox/i1/move", sess + "/approvals/p1",
		scratch + "/close", scratch + "/agents/main/close",
	}
	check := func(method, path string, body []byte) (int, []byte) {
		t.Helper()
		code, b := e.do(t, method, path, body)
		var eb ErrorBody
		switch {
		case code >= 500:
			t.Fatalf("%s: %s %s with %q: %d %s", e.name, method, path, clipBytes(body), code, b)
		case code >= 400 && (json.Unmarshal(b, &eb) != nil || eb.Error.Code == ""):
			t.Fatalf("%s: %s %s: %d is not a JSON error: %q", e.name, method, path, code, b)
		}
		return code, b
	}
	for _, p := range posts {
		code, b := check("POST", p, data)
		if p == "/api/sessions" && code == http.StatusCreated {
			var d vigil.SessionDetail
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			check("POST", "/api/sessions/"+string(d.Session.ID)+"/close", nil)
		}
	}
	param := string(data)
	if len(param) > 256 {
		param = param[:256]
	}
	check("POST", sess+"/agents/"+url.PathEscape(param)+"/messages", []byte(`{"text":"hello"}`))
	check("GET", sess+"/agents/"+url.PathEscape(param), nil)
	check("GET", "/api/sessions?owner="+url.QueryEscape(param), nil)
	check("GET", sess+"/runs?agent="+url.QueryEscape(param), nil)

	// The session goes on: lift any hold or budget the bytes set, then a
	// prompt runs to its answer.
	check("POST", sess+"/resume", nil)
	check("POST", sess+"/budget", []byte(`{}`))
	check("POST", sess+"/budget", []byte(`{"agent":"main"}`))
	code, b := check("POST", sess+"/prompts", []byte(`{"text":"still there?"}`))
	if code != http.StatusAccepted {
		t.Fatalf("%s: a normal prompt after %q: %d %s", e.name, clipBytes(data), code, b)
	}
	var pr PromptResult
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.h.rt.WaitQuiescent(ctx, vigil.SessionID(e.session)); err != nil {
		t.Fatalf("%s: the session did not answer a normal prompt after %q: %v", e.name, clipBytes(data), err)
	}
	var in InboxList
	code, b = check("GET", sess+"/inbox", nil)
	if err := json.Unmarshal(b, &in); err != nil || code != 200 {
		t.Fatalf("inbox: %d %s", code, b)
	}
	for _, it := range in.Items {
		if it.ID == pr.Item {
			t.Fatalf("%s: the prompt is still queued after %q", e.name, clipBytes(data))
		}
	}
}

func clipBytes(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// FuzzAPIDecode sends arbitrary bytes through the API into both stores
// (SQLite, and PostgreSQL when it is reachable): as the body of every POST
// route, as a path parameter and as a query value. No answer may be a 5xx
// or a panic, every error is JSON, and the session still answers a normal
// prompt afterwards. The seeds are run by go test; fuzz with
//
//	go test -run '^$' -fuzz FuzzAPIDecode -fuzztime 20s ./server/
func FuzzAPIDecode(f *testing.F) {
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	for _, seed := range []string{
		`{"text":"hello"}`,
		`{"text":"a\u0000b"}`,
		"{\"text\":\"a\x00b\"}",
		"{\"text\":\"a\xffb\"}",
		"{\"text\":\"\xc3\"}",
		`{"text":"\ud800"}`,
		`{"text":"\udfff\ud800"}`,
		`{"text":"ok","priority":"\u0000"}`,
		`{"title":"t\u0000","prompt":"p"}`,
		`{"prompt":"x","cwd":"/tmp\u0000"}`,
		`{"cwd":"../.."}`,
		`{"dirs":["\u0000"]}`,
		`{"permissions":{"mode":"auto","allow":["Bash(\u0000)"]}}`,
		`{"permissions":{"mode":"\u0000"}}`,
		`{"reason":"\u0000"}`,
		`{"reason":"` + strings.Repeat("r", 5000) + `"}`,
		`{"allow":true,"reason":"\u0000"}`,
		`{"allow":false,"always":true,"save":true}`,
		`{"agent":"\u0000","tokens":1}`,
		`{"agent":"main","tokens":1,"rounds":1}`,
		`{"tokens":99999999999999999999}`,
		`{"tokens":-9223372036854775808}`,
		`{"index":1e400}`,
		`{"index":-9223372036854775808}`,
		`{"index":9223372036854775807}`,
		`{"cost_usd":1e308}`,
		`{"cost_usd":-0}`,
		`{"wall_seconds":9223372036854775807}`,
		`{"budget":{"tokens":1e300}}`,
		deep,
		strings.Repeat("[", 100000),
		`{}`, `[]`, `null`, `""`, `0`, ``, ` `, "\x00", "\xff\xfe", `{"text":"x"} {}`,
		"a/b", "..", "%00", "main\x00", "\x00main",
	} {
		f.Add([]byte(seed))
	}
	envs := []*fuzzEnv{newFuzzEnv(f, "sqlite", newHarnessStore(f, sqliteStore(f)))}
	if st := postgresStore(f); st != nil {
		envs = append(envs, newFuzzEnv(f, "postgres", newHarnessStore(f, st)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range envs {
			e.run(t, data)
		}
	})
}
