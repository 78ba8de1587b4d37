package claudecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/doctor"
)

// Source is the Finding.Source of everything this package reports.
const Source = "claude-code"

// Options tune Scan. The zero value means the defaults.
type Options struct {
	// MissedWakeAfter is how long a deliverable task notification may wait
	// for a dequeue before it counts as a missed wake; default 60s.
	MissedWakeAfter time.Duration
	// Now is the clock, used to measure stalls that have not ended and to
	// leave alone replies too recent to have been notified yet; default
	// time.Now.
	Now func() time.Time
	// MaxLine is the longest line read, in bytes; a longer one is skipped
	// with a warning. Default 64 MiB.
	MaxLine int
}

func (o Options) withDefaults() Options {
	if o.MissedWakeAfter <= 0 {
		o.MissedWakeAfter = 60 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxLine <= 0 {
		o.MaxLine = 64 << 20
	}
	return o
}

// DefaultDir returns ~/.claude/projects, or $CLAUDE_CONFIG_DIR/projects
// when that is set.
func DefaultDir() (string, error) {
	if d := os.Getenv("CLAUDE_CONFIG_DIR"); d != "" {
		return filepath.Join(d, "projects"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("claude code projects directory: %w", err)
	}
	return filepath.Join(home, ".claude", "projects"), nil
}

// Scan reads the Claude Code sessions under path and reports the failures
// it finds. path is a projects directory (every <session-id>.jsonl below
// it, at any depth, outside a subagents directory, is a session), one
// project's directory, or one session's .jsonl file. Files are opened
// read-only and never written. An error is returned only when path cannot
// be read at all; unreadable lines and files are warnings in the report.
func Scan(path string, opts Options) (doctor.Report, error) {
	opts = opts.withDefaults()
	var rep doctor.Report
	info, err := os.Stat(path)
	if err != nil {
		return rep, fmt.Errorf("claude code sessions: %w", err)
	}
	var mains []string
	if !info.IsDir() {
		mains = []string{path}
	} else {
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %v", p, err))
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() && d.Name() == "subagents" {
				return fs.SkipDir
			}
			if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".jsonl") {
				mains = append(mains, p)
			}
			return nil
		})
		if err != nil {
			return rep, fmt.Errorf("claude code sessions: walk %s: %w", path, err)
		}
	}
	sort.Strings(mains)
	for _, m := range mains {
		s, warns := loadSession(m, opts.MaxLine)
		rep.Warnings = append(rep.Warnings, warns...)
		if s == nil {
			continue
		}
		rep.Read = append(rep.Read, s.files...)
		rep.Sessions++
		rep.Findings = append(rep.Findings, check(s, opts)...)
	}
	rep.Sort()
	return rep, nil
}

// session is one main transcript and its subagents' transcripts.
type session struct {
	id      string
	file    string
	entries []entry
	subs    []*subagent
	files   []string
}

// subagent is one subagent's transcript and meta file.
type subagent struct {
	id       string
	file     string
	entries  []entry
	metaFile string
	meta     *agentMeta
}

// agentMeta is what is read of agent-<id>.meta.json.
type agentMeta struct {
	Description  string `json:"description"`
	ToolUseID    string `json:"toolUseId"`
	RequestShape string `json:"requestShape"`
	Finished     *bool  `json:"finished"`
}

// readFile reads one transcript read-only.
func readFile(path string, maxLine int) ([]entry, []string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	return readEntries(f, path, maxLine)
}

// loadSession reads a main transcript and the subagents beside it; nil
// when the main file cannot be opened.
func loadSession(path string, maxLine int) (*session, []string) {
	entries, warns, err := readFile(path, maxLine)
	if err != nil {
		return nil, append(warns, err.Error())
	}
	s := &session{id: strings.TrimSuffix(filepath.Base(path), ".jsonl"), file: path, entries: entries, files: []string{path}}
	dir := filepath.Join(strings.TrimSuffix(path, ".jsonl"), "subagents")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		warns = append(warns, fmt.Sprintf("%s: %v", dir, err))
	}
	for _, d := range ents {
		name := d.Name()
		if !d.Type().IsRegular() || !strings.HasPrefix(name, "agent-") || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		sub := &subagent{id: strings.TrimSuffix(strings.TrimPrefix(name, "agent-"), ".jsonl"), file: filepath.Join(dir, name)}
		se, sw, err := readFile(sub.file, maxLine)
		warns = append(warns, sw...)
		if err != nil {
			warns = append(warns, err.Error())
			continue
		}
		sub.entries = se
		s.files = append(s.files, sub.file)
		meta := strings.TrimSuffix(sub.file, ".jsonl") + ".meta.json"
		if b, err := readSmall(meta, 1<<20); err == nil {
			var m agentMeta
			if err := json.Unmarshal(b, &m); err != nil {
				warns = append(warns, fmt.Sprintf("%s: %v", meta, err))
			} else {
				sub.meta, sub.metaFile = &m, meta
				s.files = append(s.files, meta)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			warns = append(warns, err.Error())
		}
		s.subs = append(s.subs, sub)
	}
	return s, warns
}

// readSmall reads a file of at most max bytes, read-only.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
