package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveRun is a 'vigil serve' running in-process.
type serveRun struct {
	lines  chan string // stdout, line by line
	code   chan int
	stderr *syncBuffer
	cancel context.CancelFunc
}

func startServe(t *testing.T, args ...string) *serveRun {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with the environment variables vars.
func startServeEnv(t *testing.T, vars map[string]string, args ...string) *serveRun {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serveRun{lines: make(chan string, 100), code: make(chan int, 1), stderr: &syncBuffer{}, cancel: cancel}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	e := &env{stdout: pw, stderr: s.stderr, getenv: func(k string) string { return vars[k] }}
	go func() {
		code := runMain(ctx, e, append([]string{"serve"}, args...))
		pw.Close()
		s.code <- code
	}()
	t.Cleanup(func() {
		cancel()
		for range s.lines {
		}
	})
	return s
}

// readUntil returns the stdout lines up to one containing want.
func (s *serveRun) readUntil(t *testing.T, want string) []string {
	t.Helper()
	var got []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("serve ended before printing %q:\n%s\nstderr: %s", want, strings.Join(got, "\n"), s.stderr.String())
			}
			got = append(got, line)
			if strings.Contains(line, want) {
				return got
			}
		case <-timeout:
			t.Fatalf("serve did not print %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// stop sends the equivalent of SIGTERM and returns the exit code.
func (s *serveRun) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	for range s.lines {
	}
	select {
	case code := <-s.code:
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
		return -1
	}
}

func TestServeTokenAndShutdown(t *testing.T) {
	data := filepath.Join(t.TempDir(), "vigil") // made by serve
	s := startServe(t, "--addr", "127.0.0.1:0", "--memory", "--data", data)
	out := s.readUntil(t, "open the UI")
	base := ""
	if f := strings.Fields(out[0]); len(f) >= 4 && f[0] == "vigil" {
		base = f[3]
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("no address in %q", out[0])
	}
	tokPath := filepath.Join(data, "token")
	b, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) != 43 { // 32 bytes, base64url without padding
		t.Errorf("token %q is not 32 base64url bytes", token)
	}
	if !strings.Contains(strings.Join(out, "\n"), token) || !strings.Contains(strings.Join(out, "\n"), tokPath) {
		t.Errorf("first start does not print the token and its file:\n%s", strings.Join(out, "\n"))
	}
	for path, want := range map[string]os.FileMode{tokPath: 0o600, data: 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if strings.Contains(s.stderr.String(), token) {
		t.Error("the token was logged")
	}

	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/healthz", ""); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	if code := get("/api/sessions", ""); code != 401 {
		t.Errorf("sessions without a token: %d", code)
	}
	if code := get("/api/sessions", token); code != 200 {
		t.Errorf("sessions with the token: %d", code)
	}
	if code := get("/metrics", token); code != 200 {
		t.Errorf("metrics: %d", code)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exit %d: %s", code, s.stderr.String())
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}

	// A second start keeps the token and does not print it.
	s2 := startServe(t, "--addr", "127.0.0.1:0", "--memory", "--data", data)
	out = s2.readUntil(t, "the token is in "+tokPath)
	if strings.Contains(strings.Join(out, "\n"), token) {
		t.Errorf("second start printed the token:\n%s", strings.Join(out, "\n"))
	}
	if code := s2.stop(t); code != 0 {
		t.Fatalf("second serve exit %d: %s", code, s2.stderr.String())
	}
	if b2, _ := os.ReadFile(tokPath); strings.TrimSpace(string(b2)) != token {
		t.Error("the token changed")
	}
}

func TestServeRefusesRemoteBind(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:7777", "example.com:7777"} {
		var stderr syncBuffer
		e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
		code := runMain(context.Background(), e, []string{"serve", "--addr", addr, "--memory", "--data", t.TempDir()})
		if code != 2 || !strings.Contains(stderr.String(), "--allow-remote") {
			t.Errorf("serve --addr %s: exit %d: %s", addr, code, stderr.String())
		}
	}
}

func TestServeRefusesReadableToken(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "token"), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), e, []string{"serve", "--addr", "127.0.0.1:0", "--memory", "--data", data}); code != 1 || !strings.Contains(stderr.String(), "chmod 600") {
		t.Errorf("serve with a world-readable token: exit %d: %s", code, stderr.String())
	}
}
