package shell

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// output receives a command's combined output: the first max bytes go to
// the file, every byte is counted, the last ones stay in the tail.
type output struct {
	file    *os.File // nil: no file
	max     int64
	written int64
	total   int64
	last    byte // last byte written to the file
	err     error
	tail    ring
}

func newOutput(f *os.File, max int64, tail int) *output {
	return &output{file: f, max: max, tail: ring{size: tail}}
}

// copyFrom reads r until EOF or until r is closed.
func (o *output) copyFrom(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.write(buf[:n])
		}
		if err != nil {
			if err != io.EOF && !errors.Is(err, os.ErrClosed) && o.err == nil {
				o.err = fmt.Errorf("read output: %w", err)
			}
			return
		}
	}
}

func (o *output) write(p []byte) {
	o.total += int64(len(p))
	o.tail.write(p)
	if o.file == nil || o.err != nil || o.written >= o.max {
		return
	}
	if room := o.max - o.written; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := o.file.Write(p)
	o.written += int64(n)
	if n > 0 {
		o.last = p[n-1]
	}
	if err != nil {
		o.err = fmt.Errorf("write output: %w", err)
	}
}

// finish appends the truncation line when bytes were dropped and closes the
// file. It returns the first error met on the way.
func (o *output) finish() error {
	if o.file == nil {
		return o.err
	}
	if o.err == nil && o.total > o.written {
		line := fmt.Sprintf("[vigil: output truncated after %d bytes; %d bytes dropped]\n", o.written, o.total-o.written)
		if o.written > 0 && o.last != '\n' {
			line = "\n" + line
		}
		if _, err := o.file.WriteString(line); err != nil {
			o.err = fmt.Errorf("write output: %w", err)
		}
	}
	if err := o.file.Close(); err != nil && o.err == nil {
		o.err = fmt.Errorf("close output: %w", err)
	}
	return o.err
}

// ring keeps the last size bytes written to it.
type ring struct {
	size int
	buf  []byte
	cut  bool // bytes were dropped from the front
}

func (r *ring) write(p []byte) {
	if len(p) >= r.size {
		r.cut = r.cut || len(p) > r.size || len(r.buf) > 0
		r.buf = append(r.buf[:0], p[len(p)-r.size:]...)
		return
	}
	if over := len(r.buf) + len(p) - r.size; over > 0 {
		r.cut = true
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, p...)
}

// String returns the kept bytes, without a partial UTF-8 sequence left at
// the front by a cut.
func (r *ring) String() string {
	b := r.buf
	if r.cut {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b)
}

// ReadOutput reads up to limit bytes of the output file at path, from
// offset on; limit <= 0 means to the end. It returns the bytes and the
// offset to read from next. Reading at or past the end returns no bytes and
// next == offset, so a caller can poll a growing file.
func ReadOutput(path string, offset, limit int64) (data []byte, next int64, err error) {
	if offset < 0 {
		return nil, offset, fmt.Errorf("read output: negative offset %d", offset)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, offset, fmt.Errorf("read output: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, offset, fmt.Errorf("read output: %w", err)
	}
	avail := fi.Size() - offset
	if avail <= 0 {
		return nil, offset, nil
	}
	if limit <= 0 || limit > avail {
		limit = avail
	}
	data = make([]byte, limit)
	n, err := f.ReadAt(data, offset)
	if err != nil && err != io.EOF {
		return nil, offset, fmt.Errorf("read output: %w", err)
	}
	return data[:n], offset + int64(n), nil
}
