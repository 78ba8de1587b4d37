package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vigilrun/vigil"
)

// openPTY opens a pseudo-terminal of cols columns: the master side, which
// the test reads, and the terminal a child writes to.
func openPTY(t *testing.T, cols uint16) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("name the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open the pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: cols}); err != nil {
		t.Fatalf("size the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// screen is what a terminal shows after out: lines, with carriage
// returns going back to the line's start and "erase to the end of line"
// (ESC [ K) honoured, the only controls the timeline writes.
func screen(out string) []string {
	var lines []string
	var cur []rune
	col := 0
	for i := 0; i < len(out); {
		switch {
		case strings.HasPrefix(out[i:], "\x1b[K"):
			cur = cur[:min(col, len(cur))]
			i += 3
			continue
		case out[i] == '\r':
			col = 0
		case out[i] == '\n':
			lines = append(lines, string(cur))
			cur, col = nil, 0
		default:
			r, n := []rune(out[i:])[0], len(string([]rune(out[i:])[0]))
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
			i += n
			continue
		}
		i++
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	return lines
}

// runLiveScenario is the scenario of TestRunStreamsTextOnce: main's one
// round streams its answer over 600ms.
const runLiveScenario = `
name: live
agents:
  main:
    turns:
      - delay: 600ms
        say: "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"
`

// TestRunStreamsTextOnce: 'vigil run' on a terminal (a pseudo-terminal,
// the vigil command a process of its own) shows the model's text while
// its round streams, before the round's end is printed, and leaves none
// of it behind: the screen at the end holds the answer as often as the
// output of the same run to a pipe, which shows no live text at all.
func TestRunStreamsTextOnce(t *testing.T) {
	const answer = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"
	scenario := filepath.Join(t.TempDir(), "live.yaml")
	if err := os.WriteFile(scenario, []byte(runLiveScenario), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(stdout io.Writer) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "run", "--data", t.TempDir(), "--script", scenario, "--timeout", "1m", "say the words")
		cmd.Env = append(os.Environ(), "VIGIL_AS_CLI=1", "XDG_CONFIG_HOME="+t.TempDir())
		cmd.Stdout = stdout
		var errb bytes.Buffer
		cmd.Stderr = &errb
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("stderr of vigil run: %s", errb.String())
			}
		})
		return cmd
	}

	// To a pipe: committed lines only.
	var piped bytes.Buffer
	if err := run(&piped).Run(); err != nil {
		t.Fatalf("vigil run to a pipe: %v", err)
	}
	if strings.Contains(piped.String(), "\x1b") || strings.Contains(piped.String(), "»") {
		t.Fatalf("output to a pipe holds live text or terminal controls:\n%q", piped.String())
	}

	// To a terminal.
	master, tty := openPTY(t, 120)
	cmd := run(tty)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds it
	var raw bytes.Buffer
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(&raw, master) // ends with EIO once the child is gone
		read <- err
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("vigil run on a terminal: %v", err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("vigil run on a terminal did not end")
	}
	<-read
	out := raw.String()
	ended := strings.Index(out, "run 1 completed")
	if ended < 0 {
		t.Fatalf("no run end on the terminal:\n%q", out)
	}
	// The first words, then more, drawn as they streamed, before the end.
	first := strings.Index(out, "main   » alpha bravo charlie")
	more := strings.Index(out, "main   » alpha bravo charlie delta echo foxtrot")
	if first < 0 || more < 0 || first >= more || more >= ended {
		t.Fatalf("the live text did not stream before the round's end (at %d, %d; end at %d):\n%q", first, more, ended, out)
	}
	final := screen(out)
	got, want := strings.Count(strings.Join(final, "\n"), answer), strings.Count(piped.String(), answer)
	if got != want || want == 0 {
		t.Errorf("the answer is on the final screen %d times, in the piped output %d:\n%s\n--- piped:\n%s", got, want, strings.Join(final, "\n"), piped.String())
	}
	for _, l := range final {
		if strings.Contains(l, "»") {
			t.Errorf("live text left on the screen: %q", l)
		}
	}
}

// TestTimelineApprovalsAndHold: the text timeline tells what a permission
// request asks to run, how it was answered and by whom, and why the user
// queue was held.
func TestTimelineApprovalsAndHold(t *testing.T) {
	var b bytes.Buffer
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tl := newTimeline(&b, start, "text")
	at := start.Add(time.Second)
	for i, e := range []struct{ typ, data string }{
		{"hold.set", `{"by":"alice","reason":"reviewing the plan"}`},
		{"approval.requested", `{"approval":{"id":"p2","agent":"a0","run":1,"use_id":"u1","tool":"Bash","input":{"command":"rm -rf build"},"asked":"2026-01-02T03:04:06Z","deadline":"2026-01-02T03:14:06Z"}}`},
		{"approval.resolved", `{"approval":"p2","allow":false,"by":"bob","reason":"not now"}`},
	} {
		tl.record(vigil.Event{Session: "s", Seq: int64(i + 1), At: at, Type: e.typ, Data: []byte(e.data)})
	}
	out := b.String()
	for _, want := range []string{
		"user   user queue held by alice: reviewing the plan",
		"main   waits for permission p2: Bash rm -rf build",
		"main   permission p2 denied by bob: not now",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
}
