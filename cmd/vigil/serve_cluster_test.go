package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/pgtest"
	"github.com/vigilrun/vigil/server"
)

const clusterSecret = "cluster-secret-0123456789abcdef"

// serveBase returns the base URL of the first line of serve's output.
func serveBase(t *testing.T, out []string) string {
	t.Helper()
	if f := strings.Fields(out[0]); len(f) >= 4 && f[0] == "vigil" && strings.HasPrefix(f[3], "http://") {
		return f[3]
	}
	t.Fatalf("no address in %q", out[0])
	return ""
}

// status sends GET path with token and returns the status and body.
func status(t *testing.T, base, path, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestServeGivenToken: --token-file, else $VIGIL_TOKEN, is the token the
// server accepts, in place of <data>/token, which is then neither made
// nor read; the token is never printed or logged.
func TestServeGivenToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.token")
	if err := os.WriteFile(file, []byte(clusterSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const envSecret = "env-secret-0123456789abcdef"
	for _, c := range []struct {
		name  string
		vars  map[string]string
		args  []string
		token string
		where string
	}{
		{"file", nil, []string{"--token-file", file}, clusterSecret, file},
		{"env", map[string]string{"VIGIL_TOKEN": envSecret}, nil, envSecret, "$VIGIL_TOKEN"},
		{"file over env", map[string]string{"VIGIL_TOKEN": envSecret}, []string{"--token-file", file}, clusterSecret, file},
	} {
		data := filepath.Join(t.TempDir(), "vigil")
		s := startServeEnv(t, c.vars, append([]string{"--addr", "127.0.0.1:0", "--memory", "--data", data}, c.args...)...)
		out := s.readUntil(t, "UI: ")
		base := serveBase(t, out)
		if !strings.Contains(strings.Join(out, "\n"), "the token is the one of "+c.where) {
			t.Errorf("%s: output does not name the token's source %s:\n%s", c.name, c.where, strings.Join(out, "\n"))
		}
		if code, _ := status(t, base, "/api/sessions", c.token); code != 200 {
			t.Errorf("%s: the given token: %d", c.name, code)
		}
		if code := s.stop(t); code != 0 {
			t.Fatalf("%s: serve exit %d: %s", c.name, code, s.stderr.String())
		}
		if strings.Contains(strings.Join(out, "\n"), c.token) || strings.Contains(s.stderr.String(), c.token) {
			t.Errorf("%s: the token was printed", c.name)
		}
		if _, err := os.Stat(filepath.Join(data, "token")); err == nil {
			t.Errorf("%s: <data>/token was made", c.name)
		}
	}
}

// TestServeRefusesBadGivenToken: a token file others can read, a missing
// one, and a token too short are refused before serving.
func TestServeRefusesBadGivenToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open.token")
	if err := os.WriteFile(open, []byte(clusterSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		vars map[string]string
		args []string
		code int
		want string
	}{
		{"readable", nil, []string{"--token-file", open}, 1, "chmod 600"},
		{"missing", nil, []string{"--token-file", filepath.Join(dir, "none")}, 2, "does not exist"},
		{"short file", nil, []string{"--token-file", short}, 2, "at least 16"},
		{"short env", map[string]string{"VIGIL_TOKEN": "abc"}, nil, 2, "at least 16"},
		{"spaces", map[string]string{"VIGIL_TOKEN": "a token with spaces in it"}, nil, 2, "printable ASCII"},
	} {
		var stderr syncBuffer
		e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string { return c.vars[k] }}
		code := runMain(context.Background(), e, append([]string{"serve", "--addr", "127.0.0.1:0", "--memory", "--data", t.TempDir()}, c.args...))
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d: %s", c.name, code, stderr.String())
		}
	}
}

// TestServeAdvertise: a bad --advertise is refused at once; a good one
// makes the server a cluster node that lists itself at that address; on
// PostgreSQL a node advertises its listen address by default, and one
// listening on every interface must be told what to advertise.
func TestServeAdvertise(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"10.0.0.2:7777", "ftp://10.0.0.2", "http://", "http://10.0.0.2:7777/api", "http://0.0.0.0:7777", "http://u:p@10.0.0.2"} {
		var stderr syncBuffer
		e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
		if code := runMain(context.Background(), e, []string{"serve", "--addr", "127.0.0.1:0", "--memory", "--data", t.TempDir(), "--advertise", bad}); code != 2 || !strings.Contains(stderr.String(), "--advertise") {
			t.Errorf("--advertise %s: exit %d: %s", bad, code, stderr.String())
		}
	}

	vars := map[string]string{"VIGIL_TOKEN": clusterSecret}
	s := startServeEnv(t, vars, "--addr", "127.0.0.1:0", "--memory", "--data", t.TempDir(), "--advertise", "http://vigil-1.internal:7777/")
	out := s.readUntil(t, "cluster node")
	base := serveBase(t, out)
	if !strings.Contains(out[len(out)-1], "advertised at http://vigil-1.internal:7777 ") {
		t.Errorf("cluster line: %q", out[len(out)-1])
	}
	nodes := func(base string) []server.Node {
		t.Helper()
		code, b := status(t, base, "/api/nodes", clusterSecret)
		var list server.NodeList
		if err := json.Unmarshal(b, &list); code != 200 || err != nil {
			t.Fatalf("nodes: %d %s", code, b)
		}
		return list.Nodes
	}
	if ns := nodes(base); len(ns) != 1 || ns[0].Address != "http://vigil-1.internal:7777" || !ns[0].Self {
		t.Errorf("nodes: %+v", ns)
	}
	// Calls from other nodes name this one as they reach it.
	req, _ := http.NewRequest("GET", base+"/api/nodes", nil)
	req.Host = "vigil-1.internal:7777"
	req.Header.Set("Authorization", "Bearer "+clusterSecret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("Host of the advertised address: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exit %d: %s", code, s.stderr.String())
	}

	dsn, err := pgtest.Try(t)
	if err != nil {
		skipLoudly(t, err)
		return
	}
	var stderr syncBuffer
	e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string { return vars[k] }}
	if code := runMain(context.Background(), e, []string{"serve", "--addr", "0.0.0.0:0", "--allow-remote", "--db", dsn, "--data", t.TempDir()}); code != 2 || !strings.Contains(stderr.String(), "give --advertise") {
		t.Errorf("cluster node on every interface without --advertise: exit %d: %s", code, stderr.String())
	}
	s = startServeEnv(t, vars, "--addr", "127.0.0.1:0", "--db", dsn, "--data", t.TempDir())
	out = s.readUntil(t, "cluster node")
	base = serveBase(t, out)
	if ns := nodes(base); len(ns) != 1 || ns[0].Address != base || !ns[0].Self || !ns[0].Alive {
		t.Errorf("PostgreSQL node: %+v, want one at %s", ns, base)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exit %d: %s", code, s.stderr.String())
	}
}

// skipLoudly says why a part of a test does not run, or fails the test
// when VIGIL_TEST_STRICT=1.
func skipLoudly(t *testing.T, err error) {
	t.Helper()
	msg := "SKIP: " + err.Error() + "; the PostgreSQL half of " + t.Name() + " does not run"
	if os.Getenv("VIGIL_TEST_STRICT") == "1" {
		t.Fatal(msg)
	}
	os.Stderr.WriteString(msg + "\n")
	t.Log(msg)
}
