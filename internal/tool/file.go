package tool

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// maxEditBytes is the largest file Edit reads into memory.
const maxEditBytes = 16 << 20

const (
	// binarySniff is how many leading bytes are checked for a NUL byte.
	binarySniff = 8000
	// maxLineBytes bounds the bytes kept of one line: enough for
	// maxLineRunes runes of any width.
	maxLineBytes = maxLineRunes * utf8.UTFMax
	// ctxEvery is how many lines are read between checks of the context.
	ctxEvery = 4096
)

// errBinary is returned by lineReader when a line holds a NUL byte.
var errBinary = errors.New("binary file")

// lineReader reads lines of text without holding more than a set number of
// bytes of any one line.
type lineReader struct {
	br  *bufio.Reader
	max int // bytes kept of one line
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// sniffBinary reports whether the first bytes hold a NUL byte.
func (lr *lineReader) sniffBinary() bool {
	head, _ := lr.br.Peek(binarySniff)
	return bytes.IndexByte(head, 0) >= 0
}

// next returns the next line without its line ending, and whether it was
// cut to lr.max bytes. At the end it returns io.EOF; a line with a NUL byte
// makes it return errBinary.
func (lr *lineReader) next() (line []byte, cut bool, err error) {
	var buf []byte
	read := false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if len(chunk) > 0 {
			read = true
			if bytes.IndexByte(chunk, 0) >= 0 {
				return nil, false, errBinary
			}
			room := lr.max - len(buf)
			if len(chunk) > room {
				chunk, cut = chunk[:room], true
			}
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		if !read {
			return nil, false, io.EOF
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		return buf, cut, nil
	}
}

// clip cuts a line to maxLineRunes runes and says so.
func clip(line []byte, cut bool) string {
	s := string(line)
	if utf8.RuneCountInString(s) > maxLineRunes {
		n := 0
		for i := range s {
			if n == maxLineRunes {
				s = s[:i]
				break
			}
			n++
		}
		cut = true
	}
	if cut {
		s += fmt.Sprintf(" … [line cut at %d characters]", maxLineRunes)
	}
	return s
}

// statFile checks that a resolved path names a regular file.
func statFile(root *os.Root, r resolved, path string) (fs.FileInfo, error) {
	fi, err := root.Stat(r.rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("file %s does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("stat %s: %v", path, unwrapPath(err))
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a file; use Glob to find files in it", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return fi, nil
}

func execRead(ctx context.Context, f *fsys, in args) (string, error) {
	path, _ := in.str("file_path")
	offset, ok := in.integer("offset")
	if !ok {
		offset = 1
	}
	limit, ok := in.integer("limit")
	if !ok {
		limit = readDefaultLimit
	}
	r, err := f.target(path)
	if err != nil {
		return "", err
	}
	root, err := r.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	if _, err := statFile(root, r, path); err != nil {
		return "", err
	}
	file, err := root.Open(r.rel)
	if err != nil {
		return "", fmt.Errorf("open %s: %v", path, unwrapPath(err))
	}
	defer file.Close()

	binary := fmt.Errorf("%s is a binary file; Read shows text files only", path)
	lr := newLineReader(file, maxLineBytes)
	if lr.sniffBinary() {
		return "", binary
	}
	var b strings.Builder
	var n, last int64
	for {
		line, cut, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errBinary) {
			return "", binary
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		n++
		if n%ctxEvery == 0 && ctx.Err() != nil {
			return "", fmt.Errorf("read %s: %w", path, ctx.Err())
		}
		if n >= offset && n < offset+limit {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "%6d\t%s", n, clip(line, cut))
			last = n
		}
	}
	switch {
	case n == 0:
		return fmt.Sprintf("[%s is empty]", path), nil
	case offset > n:
		return fmt.Sprintf("[%s has %d lines; offset %d is past the end]", path, n, offset), nil
	case last < n:
		fmt.Fprintf(&b, "\n[showing lines %d-%d of %d; read on with offset %d]", offset, last, n, last+1)
	}
	return b.String(), nil
}

func execWrite(_ context.Context, f *fsys, in args) (string, error) {
	path, _ := in.str("file_path")
	content, _ := in.str("content")
	r, err := f.target(path)
	if err != nil {
		return "", err
	}
	root, err := r.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	mode := fs.FileMode(0o644)
	created := false
	fi, err := root.Stat(r.rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return "", fmt.Errorf("stat %s: %v", path, unwrapPath(err))
	case fi.IsDir():
		return "", fmt.Errorf("%s is a directory", path)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	default:
		mode = fi.Mode().Perm()
	}
	if dir := filepath.Dir(r.rel); created && dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("create the parent directories of %s: %v", path, unwrapPath(err))
		}
	}
	if err := writeAtomic(root, r.rel, []byte(content), mode); err != nil {
		return "", fmt.Errorf("write %s: %v", path, err)
	}
	if created {
		return fmt.Sprintf("Created %s (%d bytes)", path, len(content)), nil
	}
	return fmt.Sprintf("Wrote %s (%d bytes)", path, len(content)), nil
}

func execEdit(_ context.Context, f *fsys, in args) (string, error) {
	path, _ := in.str("file_path")
	oldS, _ := in.str("old_string")
	newS, _ := in.str("new_string")
	all := in.boolean("replace_all")
	if oldS == "" {
		return "", errors.New("old_string is empty; use Write to create or replace a whole file")
	}
	if oldS == newS {
		return "", errors.New("old_string and new_string are identical; there is nothing to change")
	}
	r, err := f.target(path)
	if err != nil {
		return "", err
	}
	root, err := r.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	fi, err := statFile(root, r, path)
	if err != nil {
		return "", err
	}
	if fi.Size() > maxEditBytes {
		return "", fmt.Errorf("%s is %d bytes; Edit changes files up to %d bytes (use Bash for larger ones)", path, fi.Size(), maxEditBytes)
	}
	data, err := root.ReadFile(r.rel)
	if err != nil {
		return "", fmt.Errorf("read %s: %v", path, unwrapPath(err))
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return "", fmt.Errorf("%s is a binary file; Edit changes text files only", path)
	}
	text := string(data)
	n := strings.Count(text, oldS)
	switch {
	case n == 0:
		return "", fmt.Errorf("old_string not found in %s", path)
	case n > 1 && !all:
		return "", fmt.Errorf("old_string occurs %d times in %s; give more context or set replace_all", n, path)
	}
	if all {
		text = strings.ReplaceAll(text, oldS, newS)
	} else {
		text = strings.Replace(text, oldS, newS, 1)
	}
	if err := writeAtomic(root, r.rel, []byte(text), fi.Mode().Perm()); err != nil {
		return "", fmt.Errorf("write %s: %v", path, err)
	}
	if n == 1 {
		return fmt.Sprintf("Edited %s: replaced 1 occurrence", path), nil
	}
	return fmt.Sprintf("Edited %s: replaced %d occurrences", path, n), nil
}

// writeAtomic writes data to a temporary file beside rel and renames it
// over rel, so that readers see the old content or the new, never a mix.
func writeAtomic(root *os.Root, rel string, data []byte, mode fs.FileMode) error {
	dir, base := filepath.Split(rel)
	if len(base) > 200 {
		base = base[:200]
	}
	var tmp string
	var file *os.File
	for range 3 {
		tmp = filepath.Join(dir, "."+base+".tmp-"+rand.Text()[:12])
		var err error
		file, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create temporary file: %v", unwrapPath(err))
		}
	}
	if file == nil {
		return errors.New("create temporary file: name collisions")
	}
	err := func() error {
		if _, err := file.Write(data); err != nil {
			return err
		}
		if err := file.Chmod(mode); err != nil {
			return err
		}
		return file.Sync()
	}()
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return unwrapPath(err)
	}
	return nil
}
