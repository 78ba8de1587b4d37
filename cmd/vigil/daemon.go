package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// serveFile is the name, in the data directory, of the record a running
// 'vigil serve' keeps of where it listens, so that 'vigil mcp' finds it.
const serveFile = "serve.json"

// serveRecord is the content of serveFile.
type serveRecord struct {
	URL     string    `json:"url"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// writeServeRecord records where this process serves (mode 0600, written
// whole, so that a reader never sees half of it). The returned function
// removes it, unless another server has replaced it since.
func writeServeRecord(dir, url string) (func(), error) {
	rec := serveRecord{URL: url, PID: os.Getpid(), Started: time.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, serveFile)
	tmp, err := os.CreateTemp(dir, ".serve-*.json")
	if err != nil {
		return nil, fmt.Errorf("record the server's address: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("record the server's address: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("record the server's address: %w", err)
	}
	return func() {
		if cur, err := readServeRecord(dir); err == nil && cur.PID == rec.PID && cur.URL == rec.URL {
			os.Remove(path)
		}
	}, nil
}

// readServeRecord reads the record of the server of a data directory.
func readServeRecord(dir string) (*serveRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, serveFile))
	if err != nil {
		return nil, err
	}
	var rec serveRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.URL == "" {
		return nil, fmt.Errorf("%s is not a server record: %v", filepath.Join(dir, serveFile), err)
	}
	return &rec, nil
}

// healthy reports whether a vigil server answers at url.
func healthy(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Status == "ok"
}

// daemon finds, or starts, the background 'vigil serve' of a data
// directory.
type daemon struct {
	dir string
	// args are the serve command's flags after "serve".
	args []string
	// log is where a started server writes its logs.
	log string
	// wait bounds how long a started server may take to answer.
	wait time.Duration
	// started is told when this call started the server.
	started func(url string, pid int)
}

// ensure returns the address and token of the data directory's server,
// starting it (detached: it outlives this process and its client) when
// none answers. Concurrent callers, in any process, start at most one: the
// check and the start hold an exclusive lock on <dir>/daemon.lock.
func (d *daemon) ensure(ctx context.Context) (url, token string, err error) {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return "", "", fmt.Errorf("data directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(d.dir, "daemon.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("daemon lock: %w", err)
	}
	defer lock.Close()
	if err := flock(ctx, lock); err != nil {
		return "", "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	if rec, err := readServeRecord(d.dir); err == nil && healthy(ctx, rec.URL) {
		tok, err := readServerToken(d.dir)
		return rec.URL, tok, err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("find vigil's executable to start its server: %w", err)
	}
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("server log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(exe, append([]string{"serve"}, d.args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logf, logf
	cmd.Dir = d.dir
	// Its token is the one in the data directory, which the bridge reads:
	// a cluster token of the environment is not passed on.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "VIGIL_TOKEN=") })
	// Its own session: the client's signals to this process group, and
	// the end of this process, do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("start vigil's server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(d.wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if rec, err := readServeRecord(d.dir); err == nil && rec.PID == cmd.Process.Pid && healthy(ctx, rec.URL) {
			tok, err := readServerToken(d.dir)
			if err == nil && d.started != nil {
				d.started(rec.URL, rec.PID)
			}
			// The server is on its own now: this process does not wait for it.
			_ = cmd.Process.Release()
			return rec.URL, tok, err
		}
		select {
		case err := <-exited:
			return "", "", fmt.Errorf("vigil's server exited at start (%v); its log, %s, ends:\n%s", err, d.log, fileTail(d.log, 2000))
		case <-deadline.C:
			return "", "", fmt.Errorf("vigil's server did not answer within %s; see its log, %s", d.wait, d.log)
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-tick.C:
		}
	}
}

// flock takes an exclusive lock on f, giving up when ctx ends.
func flock(ctx context.Context, f *os.File) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("daemon lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for another vigil starting its server: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// readServerToken reads the server's bearer token from the data directory.
func readServerToken(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "token"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("vigil's server runs but %s is missing", filepath.Join(dir, "token"))
	}
	if err != nil {
		return "", fmt.Errorf("read the server's token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// fileTail returns the last n bytes of a file, or "".
func fileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}
