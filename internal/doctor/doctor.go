// Package doctor finds, in the files other agent tools write, the failures
// vigil exists to prevent (the three seed reports of the design notes): a reply
// that was never announced, a wake that never came, a continuation held
// in a queue, subagents left running. It reads; it never writes what it
// reads.
//
// Each source format has its own reader (Claude Code's session JSONL, T3
// Code's state database, vigil's own store); all of them report Findings
// of the same four kinds, so that one set of checks, run on vigil's own
// store, must find nothing.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Kind names a failure signature.
type Kind string

// The four signatures doctor looks for.
const (
	// StrandedReply: a follow-on run answered a message, but no
	// notification carrying that answer was ever queued for the sender
	// (seed report 000).
	StrandedReply Kind = "stranded-reply"
	// MissedWake: a task notification was queued while the session was
	// idle, and the next dequeue came more than the threshold later with
	// no user input between (seed report 003).
	MissedWake Kind = "missed-wake"
	// HeldContinuation: a continuation run sat in a held queue, and the
	// wake turns stopped after it (seed report 002).
	HeldContinuation Kind = "held-continuation"
	// StuckSubagent: a subagent or background task still reads as running
	// after its process or its completion is gone.
	StuckSubagent Kind = "stuck-subagent"
)

// Evidence is one line (or row) of a file that shows the failure.
type Evidence struct {
	// File is the path read.
	File string `json:"file"`
	// Line is the 1-based line number in File; 0 for a database row or a
	// log event.
	Line int `json:"line,omitempty"`
	// Row names a database row (table and key) when Line is 0.
	Row string `json:"row,omitempty"`
	// At is the time the line or row records, when it has one.
	At time.Time `json:"at,omitzero"`
	// Text is the line or row, shortened to a readable length.
	Text string `json:"text"`
	// Why says what this line shows.
	Why string `json:"why"`
}

// Finding is one occurrence of a failure signature.
type Finding struct {
	// Kind is the signature.
	Kind Kind `json:"kind"`
	// Source is the format read: "claude-code", "t3code" or "vigil".
	Source string `json:"source"`
	// Session is the session (or thread) the failure happened in.
	Session string `json:"session"`
	// File is the session's file or database.
	File string `json:"file"`
	// Start is when the failure began (the enqueue, the reply, the hold).
	Start time.Time `json:"start"`
	// End is when it ended (the late dequeue), zero when it never did.
	End time.Time `json:"end,omitzero"`
	// Stall is End-Start for a missed wake, or how long the failure
	// lasted up to the last record read.
	Stall time.Duration `json:"stall_ns,omitempty"`
	// Summary says in one sentence what happened.
	Summary string `json:"summary"`
	// Evidence is the lines that show it, in file order.
	Evidence []Evidence `json:"evidence"`
	// Action says what the user can do now.
	Action string `json:"action"`
	// Recovered is text recovered for the user, such as the stranded
	// reply from the subagent's transcript; empty when there is none.
	Recovered string `json:"recovered,omitempty"`
	// Item is the queue item to cancel, when the action is to cancel one.
	Item string `json:"item,omitempty"`
}

// Report is what one doctor run found.
type Report struct {
	// Read lists the files and databases read.
	Read []string `json:"read"`
	// Sessions is how many sessions were examined.
	Sessions int `json:"sessions"`
	// Findings are the failures found, ordered by source, session and time.
	Findings []Finding `json:"findings"`
	// Warnings are lines that could not be read, and why; reading goes on.
	Warnings []string `json:"warnings,omitempty"`
}

// Sort orders the findings by source, session, start and kind.
func (r *Report) Sort() {
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if a.Session != b.Session {
			return a.Session < b.Session
		}
		if !a.Start.Equal(b.Start) {
			return a.Start.Before(b.Start)
		}
		return a.Kind < b.Kind
	})
}

// Merge adds o's files, sessions, findings and warnings to r.
func (r *Report) Merge(o Report) {
	r.Read = append(r.Read, o.Read...)
	r.Sessions += o.Sessions
	r.Findings = append(r.Findings, o.Findings...)
	r.Warnings = append(r.Warnings, o.Warnings...)
}

// WriteJSON writes r as one JSON object with a findings array (never
// null).
func (r Report) WriteJSON(w io.Writer) error {
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Read == nil {
		r.Read = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("doctor: writing the report: %w", err)
	}
	return nil
}

// WriteText writes r for a person to read.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "read %d file(s), %d session(s): ", len(r.Read), r.Sessions)
	if len(r.Findings) == 0 {
		b.WriteString("nothing found\n")
	} else {
		fmt.Fprintf(&b, "%d finding(s)\n", len(r.Findings))
	}
	for i, f := range r.Findings {
		fmt.Fprintf(&b, "\n%d. %s  %s session %s\n", i+1, f.Kind, f.Source, f.Session)
		fmt.Fprintf(&b, "   %s\n", f.Summary)
		fmt.Fprintf(&b, "   file:  %s\n", f.File)
		fmt.Fprintf(&b, "   from:  %s\n", stamp(f.Start))
		if !f.End.IsZero() {
			fmt.Fprintf(&b, "   to:    %s\n", stamp(f.End))
		}
		if f.Stall > 0 {
			fmt.Fprintf(&b, "   stall: %s\n", f.Stall.Round(time.Millisecond))
		}
		if len(f.Evidence) > 0 {
			b.WriteString("   evidence:\n")
			for _, e := range f.Evidence {
				where := e.Row
				if e.Line > 0 {
					where = fmt.Sprintf("line %d", e.Line)
				}
				if e.File != "" && e.File != f.File {
					where = filepath.Base(e.File) + " " + where
				}
				fmt.Fprintf(&b, "     %s: %s\n       %s\n", where, e.Why, e.Text)
			}
		}
		if f.Recovered != "" {
			fmt.Fprintf(&b, "   recovered reply:\n%s\n", indent(f.Recovered, "     | "))
		}
		if f.Action != "" {
			fmt.Fprintf(&b, "   what to do: %s\n", f.Action)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("doctor: writing the report: %w", err)
	}
	return nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
