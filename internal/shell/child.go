package shell

import (
	"bufio"
	"errors"
	"strings"
	"sync"
)

// What the drivers of long-lived provider processes (the Claude Code CLI,
// the Codex app-server) share about watching a child: reading its output a
// line at a time with a bound, keeping the tail of its stderr, and saying
// why it ended.

// ReadLine reads one line without its newline. A line over max bytes is
// consumed and reported long, without its bytes, so one huge line costs no
// more than max.
func ReadLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, long, err
	}
}

// TailBuffer keeps the last Max bytes written to it; safe for concurrent
// use.
type TailBuffer struct {
	// Max is how many bytes it keeps.
	Max int
	mu  sync.Mutex
	b   []byte
}

// Write appends b, keeping the last Max bytes.
func (t *TailBuffer) Write(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if over := len(t.b) - t.Max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
}

// String returns what the buffer holds.
func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// ExitReason says why a child ended: cause (what vigil did, or "process
// exited" when it did nothing), the exit status from Wait, and the last
// 1000 bytes of its stderr.
func ExitReason(cause string, werr error, stderr string) string {
	if cause == "" {
		cause = "process exited"
	}
	status := "exit status 0"
	if werr != nil {
		status = werr.Error()
	}
	r := cause + " (" + status + ")"
	if tail := strings.TrimSpace(stderr); tail != "" {
		if len(tail) > 1000 {
			tail = "..." + tail[len(tail)-1000:]
		}
		r += "; stderr: " + tail
	}
	return r
}
