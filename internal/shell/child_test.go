package shell

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

// ReadLine drops an over-long line whole and goes on with the next.
func TestReadLineTooLong(t *testing.T) {
	in := strings.Repeat("x", 300) + "\nshort\n"
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	line, long, err := ReadLine(br, 100)
	if !long || line != nil || err != nil {
		t.Fatalf("long line: %q %v %v", line, long, err)
	}
	line, long, err = ReadLine(br, 100)
	if long || string(line) != "short" || err != nil {
		t.Fatalf("next line: %q %v %v", line, long, err)
	}
}

// TailBuffer keeps the last Max bytes across writes.
func TestTailBuffer(t *testing.T) {
	tb := TailBuffer{Max: 5}
	tb.Write([]byte("abc"))
	tb.Write([]byte("defg"))
	if got := tb.String(); got != "cdefg" {
		t.Fatalf("tail %q", got)
	}
}

// ExitReason names the cause, the status and the stderr's tail.
func TestExitReason(t *testing.T) {
	if got := ExitReason("", nil, ""); got != "process exited (exit status 0)" {
		t.Fatalf("%q", got)
	}
	long := strings.Repeat("e", 1500) + "LAST"
	got := ExitReason("closed", errors.New("signal: killed"), long)
	if !strings.HasPrefix(got, "closed (signal: killed); stderr: ...") || !strings.HasSuffix(got, "LAST") || len(got) > 1100 {
		t.Fatalf("%q", got)
	}
}
