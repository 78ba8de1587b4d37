package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/doctor"
	"github.com/vigilrun/vigil/internal/doctor/claudecode"
	"github.com/vigilrun/vigil/internal/doctor/t3code"
	"github.com/vigilrun/vigil/internal/doctor/vigilstore"
	"github.com/vigilrun/vigil/store/postgres"
	"github.com/vigilrun/vigil/store/sqlite"
)

// Exit codes of vigil doctor. Finding something is not an error of the
// command, but a script must be able to tell it from a clean bill (as diff
// and grep -q do), and both from a command that could not read what it was
// asked to: so each has its own code.
const (
	doctorClean    = 0 // everything named was read; nothing found
	doctorFound    = 1 // at least one finding
	doctorUsage    = 2 // the command line is wrong: a flag, a path that does not exist, nothing to read
	doctorReadFail = 3 // a file or database exists but could not be read
)

const doctorHelp = `usage: vigil doctor [--claude DIR] [--t3 DB] [--data DIR] [--store URL] [--json] [--stall 60s]

Finds, in the files other agent tools write and in vigil's own store, the
failures vigil exists to prevent, and says what to do about each:

  stranded-reply     a follow-on run answered a message, and no notification
                     carrying the answer was queued for the sender
  missed-wake        a task notification was queued while the session was
                     idle, and the next dequeue came more than --stall later
                     with no user input between
  held-continuation  a continuation run sat in a held queue, and the wake
                     turns stopped being recorded after it
  stuck-subagent     a subagent or background task still reads running after
                     its process or its completion is gone

With no source flag it reads ~/.claude/projects ($CLAUDE_CONFIG_DIR/projects
when that is set) and T3 Code's state database
($T3CODE_HOME/userdata/statev2.sqlite, else ~/.t3/userdata/statev2.sqlite),
those of them that exist. It never writes what it reads: databases are
opened read-only, and vigil's store is read without taking a lease or
migrating it.

Exit status: 0 when nothing is found, 1 when something is (so a script can
run it as a check), 2 when the command line is wrong (an unknown flag, a
path that does not exist, nothing to read), 3 when a source exists but could
not be read.

flags:`

func cmdDoctor(ctx context.Context, e *env, args []string) error {
	flags := flag.NewFlagSet("doctor", flag.ContinueOnError)
	flags.SetOutput(e.stderr)
	claude := flags.String("claude", "", "a Claude Code projects directory, or one session file (default ~/.claude/projects when no source is given)")
	t3 := flags.String("t3", "", "a T3 Code state database, statev2.sqlite (default T3 Code's own when no source is given)")
	data := flags.String("data", "", "a vigil data directory: reads the SQLite store vigil.db in it")
	storeURL := flags.String("store", "", "a vigil PostgreSQL store (a postgres:// URL)")
	asJSON := flags.Bool("json", false, "write one JSON object with a findings array instead of text")
	stall := flags.Duration("stall", 60*time.Second, "how long a queued notification may wait for an idle session before it is a missed wake")
	flags.Usage = func() {
		fmt.Fprintln(e.stderr, doctorHelp)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{code: doctorUsage}
	}
	usage := func(format string, a ...any) error {
		return &exitError{code: doctorUsage, err: fmt.Errorf(format, a...)}
	}
	if flags.NArg() > 0 {
		return usage("unexpected argument %q (sources are given with --claude, --t3, --data and --store)", flags.Arg(0))
	}
	if *stall <= 0 {
		return usage("--stall %s: want a positive duration", *stall)
	}
	if *storeURL != "" && !strings.HasPrefix(*storeURL, "postgres://") && !strings.HasPrefix(*storeURL, "postgresql://") {
		return usage("--store %q: want a postgres:// URL (a SQLite store is read with --data DIR)", postgres.Redact(*storeURL))
	}

	type source struct {
		what, path string
		scan       func() (doctor.Report, error)
	}
	var srcs []source
	claudeSrc := func(dir string) source {
		return source{"Claude Code sessions", dir, func() (doctor.Report, error) { return scanClaudeCode(dir, *stall) }}
	}
	t3Src := func(path string) source {
		return source{"T3 Code database", path, func() (doctor.Report, error) { return t3code.Scan(ctx, path, t3code.Options{}) }}
	}
	// Explicit sources must exist; a default one is read when it does.
	checkDir := func(flagName, dir string) error {
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return usage("--%s %s: no such directory", flagName, dir)
		case err != nil:
			return &exitError{code: doctorReadFail, err: fmt.Errorf("--%s %s: %w", flagName, dir, err)}
		case !fi.IsDir():
			return usage("--%s %s: not a directory", flagName, dir)
		}
		return nil
	}
	if *claude != "" {
		if _, err := os.Stat(*claude); errors.Is(err, fs.ErrNotExist) {
			return usage("--claude %s: no such directory or file", *claude)
		}
		srcs = append(srcs, claudeSrc(*claude))
	}
	if *t3 != "" {
		if _, err := os.Stat(*t3); errors.Is(err, fs.ErrNotExist) {
			return usage("--t3 %s: no such file", *t3)
		}
		srcs = append(srcs, t3Src(*t3))
	}
	if *data != "" {
		if err := checkDir("data", *data); err != nil {
			return err
		}
		path := filepath.Join(*data, "vigil.db")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return usage("--data %s: no vigil store there (%s does not exist)", *data, path)
		}
		srcs = append(srcs, source{"vigil store", path, func() (doctor.Report, error) {
			st, err := sqlite.OpenReader(ctx, path)
			if err != nil {
				return doctor.Report{}, err
			}
			defer st.Close()
			return vigilstore.Scan(ctx, st, vigilstore.Options{Stall: *stall, Name: path})
		}})
	}
	if *storeURL != "" {
		name := postgres.Redact(*storeURL)
		srcs = append(srcs, source{"vigil store", name, func() (doctor.Report, error) {
			st, err := postgres.OpenReader(ctx, *storeURL)
			if err != nil {
				return doctor.Report{}, err
			}
			defer st.Close(context.WithoutCancel(ctx))
			return vigilstore.Scan(ctx, st, vigilstore.Options{Stall: *stall, Name: name})
		}})
	}
	if len(srcs) == 0 {
		home := e.getenv("HOME")
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return usage("no source given and no home directory to look in (%v): give --claude, --t3, --data or --store", err)
			}
			home = h
		}
		var looked []string
		dir := filepath.Join(home, ".claude", "projects")
		if c := e.getenv("CLAUDE_CONFIG_DIR"); c != "" {
			dir = filepath.Join(c, "projects") // where the CLI writes then
		}
		if isDir(dir) {
			srcs = append(srcs, claudeSrc(dir))
		} else {
			looked = append(looked, dir)
		}
		if path := t3code.DefaultPath(e.getenv, home); isFile(path) {
			srcs = append(srcs, t3Src(path))
		} else {
			looked = append(looked, path)
		}
		if len(srcs) == 0 {
			return usage("nothing to read: %s not found; give --claude, --t3, --data or --store", strings.Join(looked, " and "))
		}
	}

	var rep doctor.Report
	for _, s := range srcs {
		r, err := s.scan()
		if err != nil {
			return &exitError{code: doctorReadFail, err: fmt.Errorf("read the %s %s: %w", s.what, s.path, err)}
		}
		rep.Merge(r)
	}
	rep.Sort()
	var err error
	if *asJSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return err
	}
	if len(rep.Findings) > 0 {
		return &exitError{code: doctorFound}
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// scanClaudeCode reads a Claude Code projects directory, or one session
// file.
func scanClaudeCode(path string, stall time.Duration) (doctor.Report, error) {
	return claudecode.Scan(path, claudecode.Options{MissedWakeAfter: stall})
}
