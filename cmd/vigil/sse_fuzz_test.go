package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// parseSSE is a straightforward reading of the EventSource standard's
// parsing rules, to check readSSE against: split the whole text into lines
// at "\r\n", "\n" or "\r", then apply the field rules.
func parseSSE(text string) []sseFrame {
	var frames []sseFrame
	var lines []string
	for len(text) > 0 {
		i := strings.IndexAny(text, "\r\n")
		if i < 0 {
			lines = append(lines, text) // no end: dropped with the frame
			break
		}
		lines = append(lines, text[:i])
		if text[i] == '\r' && i+1 < len(text) && text[i+1] == '\n' {
			i++
		}
		text = text[i+1:]
	}
	var f sseFrame
	var data []string
	for _, line := range lines {
		switch {
		case line == "":
			if data != nil {
				f.Data = strings.Join(data, "\n")
				if f.Event == "" {
					f.Event = "message"
				}
				frames = append(frames, f)
			}
			f, data = sseFrame{}, nil
		case line[0] == ':':
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "data":
				data = append(data, value)
			case "event":
				f.Event = value
			case "id":
				if !strings.Contains(value, "\x00") {
					f.ID, f.HasID = value, true
				}
			}
		}
	}
	return frames
}

// readAll runs readSSE over r and collects the frames.
func readAll(r io.Reader) ([]sseFrame, error) {
	var got []sseFrame
	err := readSSE(r, func(f sseFrame) error {
		got = append(got, f)
		return nil
	})
	return got, err
}

func sameFrames(a, b []sseFrame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzSSEParse feeds arbitrary bytes to the CLI's event stream parser, whole
// and one byte at a time: it never panics, gives the same frames both
// ways, and the frames the standard's rules give.
//
//	go test -run '^$' -fuzz FuzzSSEParse -fuzztime 20s ./cmd/vigil/
func FuzzSSEParse(f *testing.F) {
	for _, seed := range []string{
		": vigil event stream\nretry: 2000\nid: 7\n\n",
		"id: 8\nevent: run.started\ndata: {\"session\":\"s1\",\"seq\":8}\n\n",
		"event: vigil.cut\ndata: {\"reason\":\"behind\",\"message\":\"slow\",\"resume_after\":8}\n\n",
		"data: a\ndata: b\r\n\r\ndata:c\rdata\r\r",
		"data: x\r",
		"data: x\r\n",
		"data: no end",
		"id: a\x00b\ndata: x\n\n",
		"\xff\xfe: bad utf-8\ndata: \xff\n\n",
		": heartbeat\n\n: heartbeat\n\n",
		"event\nid\ndata\n\n",
		"\n\n\n\r\r\r\n",
		"data: " + strings.Repeat("x", 70000) + "\n\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		whole, err := readAll(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("readSSE: %v", err)
		}
		bytewise, err := readAll(iotest.OneByteReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("readSSE one byte at a time: %v", err)
		}
		if !sameFrames(whole, bytewise) {
			t.Fatalf("whole %+v, one byte at a time %+v", whole, bytewise)
		}
		// The standard treats the text as UTF-8 (bad bytes become U+FFFD);
		// readSSE keeps the bytes, which the JSON decoder then checks.
		if want := parseSSE(string(b)); !sameFrames(whole, want) {
			t.Fatalf("readSSE %+v, the standard's rules %+v", whole, want)
		}
	})
}

// TestReadSSEStops: the caller's error stops the reading and is returned;
// a frame over the bound is an error, not a memory exhaustion.
func TestReadSSEStops(t *testing.T) {
	stop := errors.New("enough")
	n := 0
	err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\ndata: 3\n\n"), func(sseFrame) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("err %v after %d frames", err, n)
	}
	huge := io.MultiReader(strings.NewReader("data: "), &repeatReader{b: 'x', n: maxSSEFrame + 10})
	if err := readSSE(huge, func(sseFrame) error { return nil }); err == nil {
		t.Fatal("a frame over the bound was read")
	}
	many := io.MultiReader(strings.NewReader("data: x\n"), strings.NewReader(strings.Repeat("data: "+strings.Repeat("y", 1<<20)+"\n", maxSSEFrame>>20)))
	if err := readSSE(many, func(sseFrame) error { return nil }); err == nil {
		t.Fatal("a frame of many lines over the bound was read")
	}
}

// repeatReader yields n copies of b.
type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}
