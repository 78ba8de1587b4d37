package claudecode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/doctor"
)

// fixtureNow is a clock an hour after the fixtures were written, so that
// every reply in them is old enough to have been notified.
func fixtureNow(t *testing.T, dir string) func() time.Time {
	t.Helper()
	var last time.Time
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		es, _, err := readFile(p, 1<<26)
		for _, e := range es {
			if e.At.After(last) {
				last = e.At
			}
		}
		return err
	})
	return func() time.Time { return last.Add(time.Hour) }
}

// expect checks that rep holds exactly the finding the named case puts
// back (none for "unmodified"), with its evidence and recovered text.
func expect(t *testing.T, name string, rep doctor.Report) {
	t.Helper()
	if len(rep.Warnings) > 0 {
		t.Errorf("%s: warnings %v", name, rep.Warnings)
	}
	if name == "unmodified" {
		if len(rep.Findings) != 0 {
			t.Fatalf("unmodified session: want nothing, found %s", dump(rep))
		}
		return
	}
	if len(rep.Findings) != 1 || string(rep.Findings[0].Kind) != name {
		t.Fatalf("%s: want exactly one %s, found %s", name, name, dump(rep))
	}
	f := rep.Findings[0]
	if f.Source != Source || f.Session == "" || f.File == "" || f.Start.IsZero() || f.Summary == "" || f.Action == "" || len(f.Evidence) < 2 {
		t.Fatalf("%s: incomplete finding %s", name, dump(rep))
	}
	for _, e := range f.Evidence {
		if e.File == "" || (e.Line == 0 && e.Row == "") || e.Why == "" || e.Text == "" {
			t.Fatalf("%s: incomplete evidence %+v", name, e)
		}
	}
	why := func(sub string) {
		t.Helper()
		for _, e := range f.Evidence {
			if strings.Contains(e.Text, sub) {
				return
			}
		}
		t.Fatalf("%s: no evidence line with %q in %s", name, sub, dump(rep))
	}
	switch f.Kind {
	case doctor.StrandedReply:
		if f.Recovered != "SUB-FOLLOWON: got MSG2; the number is 7" {
			t.Fatalf("recovered %q", f.Recovered)
		}
		why("tool_use SendMessage")
		why("The coordinator sent a message while you were working: MSG2")
	case doctor.StuckSubagent:
		if f.Recovered != "SUB-FIRST: the answer is 42" {
			t.Fatalf("recovered %q", f.Recovered)
		}
		why("async_launched")
	case doctor.MissedWake:
		if f.End.Sub(f.Start) != f.Stall || f.Stall < 10*time.Minute || f.Stall > 10*time.Minute+5*time.Second {
			t.Fatalf("stall %s from %s to %s, want 10 minutes and the original gap", f.Stall, f.Start, f.End)
		}
		why("queue-operation enqueue: <task-notification>")
		why("queue-operation dequeue")
	case doctor.HeldContinuation:
		if !strings.Contains(f.Item, "task b") || !strings.Contains(f.Item, "Sleep then print") {
			t.Fatalf("item %q: want the Bash task's notification", f.Item)
		}
	}
}

func dump(rep doctor.Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// idsOf finds the scripted run's task ids in a session: the subagent's
// from its file name, the Bash task's from the first other notification.
func idsOf(t *testing.T, fs *files) ids {
	t.Helper()
	var id ids
	for rel := range fs.lines {
		if b := filepath.Base(rel); strings.HasPrefix(b, "agent-") && strings.HasSuffix(b, ".jsonl") {
			id.agent = strings.TrimSuffix(strings.TrimPrefix(b, "agent-"), ".jsonl")
		}
	}
	for _, l := range fs.lines[fs.main] {
		if d := decode(l); d.Operation == "enqueue" {
			if n, ok := parseNotice(d.Content); ok && n.Task != id.agent {
				id.bash = n.Task
				break
			}
		}
	}
	if id.agent == "" || id.bash == "" {
		t.Fatalf("task ids not found: %+v", id)
	}
	return id
}

// The committed fixtures: each one is the unmodified session with the
// change its CHANGES.txt states (checked by redoing the change), and
// doctor finds exactly that failure in it.
func TestFixtures(t *testing.T) {
	root := filepath.Join("testdata", "cli")
	orig := readFiles(t, filepath.Join(root, "unmodified"))
	for _, name := range []string{"unmodified", "stranded-reply", "missed-wake", "held-continuation", "stuck-subagent"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			if name != "unmodified" {
				var m *mutation
				for i := range mutations {
					if mutations[i].name == name {
						m = &mutations[i]
					}
				}
				want := orig.clone()
				changed := m.edit(t, want, idsOf(t, want))
				note, err := os.ReadFile(filepath.Join(dir, "CHANGES.txt"))
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range changed {
					if !strings.Contains(string(note), c) {
						t.Errorf("CHANGES.txt does not say %q", c)
					}
				}
				got := readFiles(t, dir)
				for rel, lines := range want.lines {
					if strings.Join(got.lines[rel], "\n") != strings.Join(lines, "\n") {
						t.Errorf("%s/%s is not the unmodified file with the stated change", dir, rel)
					}
				}
			}
			rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Sessions != 1 {
				t.Fatalf("%d sessions", rep.Sessions)
			}
			expect(t, name, rep)
			if testing.Verbose() {
				t.Logf("\n%s", dump(rep))
			}
		})
	}
}

// A stall no longer than the threshold is no missed wake.
func TestMissedWakeThreshold(t *testing.T) {
	dir := filepath.Join("testdata", "cli", "missed-wake")
	for _, c := range []struct {
		after time.Duration
		want  int
	}{{11 * time.Minute, 0}, {10 * time.Minute, 1}, {0, 1}} {
		rep, err := Scan(dir, Options{MissedWakeAfter: c.after, Now: fixtureNow(t, dir)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != c.want {
			t.Errorf("threshold %s: want %d findings, got %s", c.after, c.want, dump(rep))
		}
	}
}

// The samples of real sessions (trimmed): nothing to find, and the queue
// replay shows why.
func TestSamples(t *testing.T) {
	for _, c := range []struct {
		name string
		// notes: for each notification in order, "idle" (queued while
		// idle, dequeued), "turn" (queued during a turn, dequeued after
		// it), "removed" (absorbed into the running turn).
		notes []string
	}{
		{"bg_bash", []string{"idle"}},
		{"race_queue_remove", []string{"removed", "turn"}},
		{"sendmessage_running_and_finished", []string{"idle", "turn"}},
		{"two_bash_notifications", []string{"turn", "turn"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "samples", c.name)
			rep, err := Scan(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Sessions != 1 || len(rep.Findings) != 0 || len(rep.Warnings) != 0 {
				t.Fatalf("want one session and nothing found:\n%s", dump(rep))
			}
			main, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
			es, _, err := readFile(main[0], 1<<26)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range replayQueue(es).items {
				switch {
				case !it.isNote:
					if it.deq == nil {
						t.Errorf("prompt of line %d never dequeued", it.enq.line)
					}
				case it.removed != nil:
					got = append(got, "removed")
				case it.deq != nil && !it.busy:
					got = append(got, "idle")
				case it.deq != nil && it.freeAt != nil:
					got = append(got, "turn")
				default:
					got = append(got, "?")
				}
			}
			if strings.Join(got, " ") != strings.Join(c.notes, " ") {
				t.Fatalf("notifications %v, want %v", got, c.notes)
			}
		})
	}
}

// snapshot is a file's bytes and times.
type snapshot struct {
	b    []byte
	mod  time.Time
	mode os.FileMode
}

func snap(t *testing.T, dir string) map[string]snapshot {
	t.Helper()
	m := map[string]snapshot{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		s := snapshot{mod: info.ModTime(), mode: info.Mode()}
		if !info.IsDir() {
			s.b, err = os.ReadFile(p)
		}
		m[p] = s
		return err
	})
	return m
}

// Scan changes nothing it reads: every file's bytes, mode and mtime, and
// the directories', are as before; nothing is added.
func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	readFiles(t, filepath.Join("testdata", "cli", "stranded-reply")).write(t, dir)
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		return os.Chtimes(p, old, old)
	})
	before := snap(t, dir)
	rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
	if err != nil || len(rep.Findings) != 1 {
		t.Fatalf("scan: %v\n%s", err, dump(rep))
	}
	after := snap(t, dir)
	if len(after) != len(before) {
		t.Fatalf("%d entries before, %d after", len(before), len(after))
	}
	for p, b := range before {
		a := after[p]
		if !bytes.Equal(a.b, b.b) || !a.mod.Equal(b.mod) || a.mode != b.mode {
			t.Errorf("%s changed: mtime %s -> %s, mode %s -> %s, %d -> %d bytes", p, b.mod, a.mod, b.mode, a.mode, len(b.b), len(a.b))
		}
	}
}

// Unreadable lines are warnings; the lines around them are still read and
// checked.
func TestMalformedLines(t *testing.T) {
	src := readFiles(t, filepath.Join("testdata", "cli", "missed-wake"))
	bad := []string{
		"not json at all",
		`{"type":"user","message":{"content":"a NUL` + "\x00" + ` byte"}}`,
		`{"type":"queue-operation","operation":"enqueue","timestamp":"yesterday"}`,
		`["an array"]`,
		`{"type":"user","message":{"content":"` + strings.Repeat("x", 5000) + `"}}`,
		"\xff\xfe invalid utf-8",
	}
	lines := src.lines[src.main]
	var mixed []string
	for i, l := range lines {
		mixed = append(mixed, l)
		if i < len(bad) {
			mixed = append(mixed, bad[i])
		}
	}
	src.lines[src.main] = mixed
	dir := t.TempDir()
	src.write(t, dir)
	// The file ends inside a line.
	p := filepath.Join(dir, src.main)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"queue-operation","operation":"enq`)
	f.Close()

	rep, err := Scan(dir, Options{MaxLine: 4096, Now: fixtureNow(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != doctor.MissedWake {
		t.Fatalf("want the missed wake still found:\n%s", dump(rep))
	}
	want := []string{":2: not a JSON object", ":4: contains a NUL byte", `:6: timestamp "yesterday"`, ":8: not a JSON object", ":10: line longer than 4096 bytes", ":12: not a JSON object", "truncated"}
	all := strings.Join(rep.Warnings, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("no warning %q in:\n%s", w, all)
		}
	}
	if len(rep.Warnings) != len(want) {
		t.Errorf("%d warnings, want %d:\n%s", len(rep.Warnings), len(want), all)
	}
}

// Scan takes one session file as well as a directory, and fails only when
// the path cannot be read at all.
func TestScanPaths(t *testing.T) {
	dir := filepath.Join("testdata", "cli", "stuck-subagent")
	main, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	rep, err := Scan(main[0], Options{Now: fixtureNow(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "stuck-subagent", rep)
	if _, err := Scan(filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Fatal("a missing path: no error")
	}
	rep, err = Scan(t.TempDir(), Options{})
	if err != nil || rep.Sessions != 0 {
		t.Fatalf("an empty directory: %v %+v", err, rep)
	}
}

// The JSON report carries the kind, the session, the times and the
// evidence.
func TestJSONReport(t *testing.T) {
	dir := filepath.Join("testdata", "cli", "stranded-reply")
	rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Findings []struct {
			Kind, Session, Start, Recovered string
			Evidence                        []struct {
				File string
				Line int
			}
		}
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Findings) != 1 || got.Findings[0].Kind != "stranded-reply" || got.Findings[0].Session == "" || got.Findings[0].Start == "" || len(got.Findings[0].Evidence) == 0 || got.Findings[0].Evidence[0].Line == 0 {
		t.Fatalf("json: %s", b.String())
	}
}

// A run's notification is found by its reply, else by the tool use that
// started the run, else by time: the same finding when the notifications'
// <result> (and then their <tool-use-id>) are cut out of the main file.
func TestNotificationMatching(t *testing.T) {
	result := regexp.MustCompile(`<result>[^<]*</result>`)
	toolUse := regexp.MustCompile(`<tool-use-id>[^<]*</tool-use-id>`)
	for _, name := range []string{"stranded-reply", "stuck-subagent"} {
		for _, strip := range [][]*regexp.Regexp{{result}, {result, toolUse}} {
			fs := readFiles(t, filepath.Join("testdata", "cli", name))
			for i, l := range fs.lines[fs.main] {
				for _, re := range strip {
					l = re.ReplaceAllString(l, "")
				}
				fs.lines[fs.main][i] = l
			}
			dir := t.TempDir()
			fs.write(t, dir)
			rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
			if err != nil {
				t.Fatal(err)
			}
			t.Run(fmt.Sprintf("%s/without-%d-tags", name, len(strip)), func(t *testing.T) { expect(t, name, rep) })
		}
	}
}

// The losing order of seed report 000: the first run's notification is
// queued after the follow-on started, and the follow-on's never is. With
// no <result> to match, the tool use id tells the runs apart.
func TestStopNotifiedAfterFollowOn(t *testing.T) {
	fs := readFiles(t, filepath.Join("testdata", "cli", "stranded-reply"))
	id := idsOf(t, fs)
	var followOn time.Time
	for rel, lines := range fs.lines {
		if strings.HasSuffix(rel, "agent-"+id.agent+".jsonl") {
			for _, l := range lines {
				if d := decode(l); d.Origin != nil && d.Origin.Kind == "coordinator" {
					followOn = timeOf(t, l)
				}
			}
		}
	}
	enq := fs.find(t, 0, "the first run's notification", isEnqueueOf("<task-id>"+id.agent+"</task-id>"))
	late := followOn.Add(50 * time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z")
	l := timestampRe.ReplaceAllString(fs.lines[fs.main][enq], `"timestamp":"`+late+`"`)
	fs.lines[fs.main][enq] = regexp.MustCompile(`<result>[^<]*</result>`).ReplaceAllString(l, "")
	dir := t.TempDir()
	fs.write(t, dir)
	rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "stranded-reply", rep)
}

// A notification queued during a turn that then ends without taking it,
// and never dequeued: a missed wake that has not ended, measured from the
// end of the turn up to now; the notification is the item to deliver.
func TestWakeNeverCame(t *testing.T) {
	fs := readFiles(t, filepath.Join("testdata", "cli", "unmodified"))
	enq := fs.find(t, 0, "the follow-on's notification", isEnqueueOf("<result>SUB-FOLLOWON"))
	end := fs.find(t, enq+1, "the turn's end", isAssistantSaying("MAIN: follow-up sent"))
	deq := fs.find(t, end+1, "its dequeue", isDequeue)
	fs.lines[fs.main] = fs.lines[fs.main][:deq]
	dir := t.TempDir()
	fs.write(t, dir)
	turnEnd := timeOf(t, fs.lines[fs.main][end])
	now := turnEnd.Add(2 * time.Hour)
	rep, err := Scan(dir, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 {
		t.Fatalf("want one missed wake:\n%s", dump(rep))
	}
	f := rep.Findings[0]
	if f.Kind != doctor.MissedWake || !f.End.IsZero() || !f.Start.Equal(turnEnd) || f.Stall != 2*time.Hour ||
		f.Recovered != "SUB-FOLLOWON: got MSG2; the number is 7" || !strings.Contains(f.Item, "task a") {
		t.Fatalf("finding:\n%s", dump(rep))
	}
	// Within the threshold of now, it is not (yet) a missed wake.
	rep, err = Scan(dir, Options{Now: func() time.Time { return turnEnd.Add(time.Minute) }})
	if err != nil || len(rep.Findings) != 0 {
		t.Fatalf("a minute after: %v\n%s", err, dump(rep))
	}
}

// A stall that a user prompt ended: still a missed wake, and the evidence
// says the user's typing ended it.
func TestMissedWakeEndedByUser(t *testing.T) {
	fs := readFiles(t, filepath.Join("testdata", "cli", "missed-wake"))
	id := idsOf(t, fs)
	enq := fs.find(t, 0, "the Bash task's notification", isEnqueueOf("<task-id>"+id.bash+"</task-id>"))
	deq := fs.find(t, enq+1, "its dequeue", isDequeue)
	at := timeOf(t, fs.lines[fs.main][deq]).Add(-5 * time.Millisecond).Format("2006-01-02T15:04:05.000Z")
	typed := []string{
		`{"type":"queue-operation","operation":"enqueue","timestamp":"` + at + `","sessionId":"s","content":"are you still there?"}`,
		`{"type":"queue-operation","operation":"dequeue","timestamp":"` + at + `","sessionId":"s"}`,
		`{"type":"user","message":{"role":"user","content":"are you still there?"},"timestamp":"` + at + `"}`,
	}
	l := fs.lines[fs.main]
	fs.lines[fs.main] = append(append(append([]string{}, l[:deq]...), typed...), l[deq:]...)
	dir := t.TempDir()
	fs.write(t, dir)
	rep, err := Scan(dir, Options{Now: fixtureNow(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != doctor.MissedWake || !strings.Contains(dump(rep), "the user's typing ended the stall") {
		t.Fatalf("want a missed wake ended by the user:\n%s", dump(rep))
	}
}
