package sim

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Regression is a seed that once violated a rule, kept so that every run of
// the tests and of CI replays it.
type Regression struct {
	Seed int64
	// Note says what the seed found: the comment on its line.
	Note string
	// Line is the seed's line number in its file.
	Line int
}

// ReadRegressions reads a list of regression seeds: one seed a line, each
// followed by a "#" comment that says what it found; blank lines and lines
// that are only a comment are skipped.
func ReadRegressions(path string) ([]Regression, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseRegressions(f, path)
}

// ParseRegressions parses a list of regression seeds in the format of
// ReadRegressions; name is used in errors.
func ParseRegressions(r io.Reader, name string) ([]Regression, error) {
	var out []Regression
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, note, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		seed, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q is not a seed", name, n, line)
		}
		out = append(out, Regression{Seed: seed, Note: strings.TrimSpace(note), Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// Explain writes what is known about a first violation that names a run:
// the step at which the run started and the steps that touched its agent;
// then, if lines > 0, the trace of those steps (the last lines of them),
// got by replaying the seed with opts and Trace set to the agent — a seed
// always replays the same. It writes nothing when the violation names no
// run.
func Explain(out io.Writer, opts Options, r Result, lines int) {
	v := r.First
	if v == nil || v.Agent == "" {
		return
	}
	run := fmt.Sprintf("run %s#%d", cmp.Or(v.Name, string(v.Agent)), v.Run)
	if v.Name != "" && v.Name != string(v.Agent) {
		run += " (agent " + string(v.Agent) + ")"
	}
	if v.RunStep > 0 {
		fmt.Fprintf(out, "%s started at step #%d\n", run, v.RunStep)
	} else {
		fmt.Fprintf(out, "%s started at no step of this seed\n", run)
	}
	const maxSteps = 200
	steps := v.Steps
	fmt.Fprintf(out, "%d steps touched %s:", len(steps), v.Agent)
	if len(steps) > maxSteps {
		fmt.Fprintf(out, " (%d earlier ones left out)", len(steps)-maxSteps)
		steps = steps[len(steps)-maxSteps:]
	}
	for i, s := range steps {
		if i%20 == 0 {
			fmt.Fprint(out, "\n ")
		}
		fmt.Fprintf(out, " #%d", s)
	}
	fmt.Fprintln(out)
	if lines <= 0 {
		return
	}
	opts.Seed, opts.Trace = r.Seed, string(v.Agent)
	trace := Run(opts).Trace
	fmt.Fprintf(out, "trace of the steps that touched %s (replayed with --trace %s):\n", v.Agent, v.Agent)
	if len(trace) > lines {
		fmt.Fprintf(out, "  ... %d earlier steps\n", len(trace)-lines)
		trace = trace[len(trace)-lines:]
	}
	for _, l := range trace {
		fmt.Fprintln(out, "  "+l)
	}
}
