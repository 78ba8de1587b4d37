package claudecode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// The failures are put back into a real session by editing its files:
// deleting lines or moving timestamps. Each edit says what it changed, by
// line number, so that the fixtures can say it too.

// files is a session's files as lines, keyed by the path relative to the
// directory they were read from.
type files struct {
	main  string // key of the main transcript
	lines map[string][]string
}

// readFiles reads every file under dir.
func readFiles(t *testing.T, dir string) *files {
	t.Helper()
	fs := &files{lines: map[string][]string{}}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(p, ".jsonl") && !strings.HasSuffix(p, ".meta.json") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fs.lines[rel] = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if strings.HasSuffix(p, ".jsonl") && filepath.Base(filepath.Dir(p)) != "subagents" {
			fs.main = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fs.main == "" {
		t.Fatalf("no main transcript under %s", dir)
	}
	return fs
}

// write writes the files under dir.
func (fs *files) write(t *testing.T, dir string) {
	t.Helper()
	for rel, lines := range fs.lines {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (fs *files) clone() *files {
	c := &files{main: fs.main, lines: map[string][]string{}}
	for k, v := range fs.lines {
		c.lines[k] = append([]string(nil), v...)
	}
	return c
}

// line is one decoded line, for the predicates below.
type line struct {
	Type, Operation, Content, Timestamp string
	Origin                              *struct{ Kind string }
	Message                             *struct {
		Content json.RawMessage
	}
}

func decode(s string) line {
	var l line
	json.Unmarshal([]byte(s), &l)
	return l
}

// find returns the index of the first main line at or after from that
// match accepts, or fails the test.
func (fs *files) find(t *testing.T, from int, what string, match func(l line, raw string) bool) int {
	t.Helper()
	for i := from; i < len(fs.lines[fs.main]); i++ {
		if raw := fs.lines[fs.main][i]; match(decode(raw), raw) {
			return i
		}
	}
	t.Fatalf("no line in %s: %s", fs.main, what)
	return -1
}

func isEnqueueOf(sub string) func(line, string) bool {
	return func(l line, _ string) bool {
		return l.Type == "queue-operation" && l.Operation == "enqueue" && strings.Contains(l.Content, sub)
	}
}

func isDequeue(l line, _ string) bool { return l.Type == "queue-operation" && l.Operation == "dequeue" }

func isNotificationEntry(sub string) func(line, string) bool {
	return func(l line, raw string) bool {
		return l.Type == "user" && l.Origin != nil && l.Origin.Kind == "task-notification" && strings.Contains(raw, sub)
	}
}

func isAssistantSaying(sub string) func(line, string) bool {
	return func(l line, raw string) bool { return l.Type == "assistant" && strings.Contains(raw, sub) }
}

// deleteMain deletes main lines (0-based indexes) and says which, by
// their 1-based numbers in the file before the edit.
func (fs *files) deleteMain(idx ...int) string {
	sort.Ints(idx)
	drop := map[int]bool{}
	var nums []string
	for _, i := range idx {
		drop[i] = true
		nums = append(nums, fmt.Sprintf("%d (%s)", i+1, describeLine(fs.lines[fs.main][i])))
	}
	var kept []string
	for i, l := range fs.lines[fs.main] {
		if !drop[i] {
			kept = append(kept, l)
		}
	}
	fs.lines[fs.main] = kept
	return fmt.Sprintf("deleted from %s the lines %s", fs.main, strings.Join(nums, ", "))
}

// describeLine names a line for the change notes.
func describeLine(raw string) string {
	l := decode(raw)
	switch {
	case l.Type == "queue-operation":
		return l.Operation
	case l.Type == "user" && l.Origin != nil:
		return "user entry, origin " + l.Origin.Kind
	case l.Type == "assistant" && l.Message != nil:
		t, uses, _ := contentText(l.Message.Content)
		if len(uses) > 0 {
			return "assistant tool_use " + uses[0].Name
		}
		return fmt.Sprintf("assistant %q", shorten(t, 40))
	}
	return l.Type
}

var timestampRe = regexp.MustCompile(`"timestamp":\s?"([^"]+)"`)

// shiftFrom moves every timestamp at or after cut, in every file, by d, and
// says so.
func (fs *files) shiftFrom(t *testing.T, cut time.Time, d time.Duration) string {
	t.Helper()
	n := 0
	for rel, lines := range fs.lines {
		for i, l := range lines {
			lines[i] = timestampRe.ReplaceAllStringFunc(l, func(m string) string {
				ts := timestampRe.FindStringSubmatch(m)[1]
				at, err := time.Parse(time.RFC3339Nano, ts)
				if err != nil || at.Before(cut) {
					return m
				}
				n++
				return strings.Replace(m, ts, at.Add(d).UTC().Format("2006-01-02T15:04:05.000Z"), 1)
			})
		}
		fs.lines[rel] = lines
	}
	return fmt.Sprintf("moved every timestamp at or after %s (%d of them, in every file) %s later", cut.UTC().Format(time.RFC3339Nano), n, d)
}

// trimmed names the large lines that trim drops: request bodies and
// shapes, and attachments that list prompts, skills, agents and tools.
// doctor reads none of them.
const trimmed = "api-request-blob, api-request-shape, and attachment lines of type prompt_snapshot, skill_listing, agent_listing_delta, deferred_tools_delta"

// trim drops the lines trimmed names, to keep the fixtures small.
func (fs *files) trim() {
	for rel, lines := range fs.lines {
		var kept []string
		for _, l := range lines {
			var a struct {
				Type       string
				Attachment struct{ Type string }
			}
			json.Unmarshal([]byte(l), &a)
			switch a.Type + "/" + a.Attachment.Type {
			case "api-request-blob/", "api-request-shape/", "attachment/prompt_snapshot", "attachment/skill_listing",
				"attachment/agent_listing_delta", "attachment/deferred_tools_delta":
				continue
			}
			kept = append(kept, l)
		}
		fs.lines[rel] = kept
	}
}

// mutation puts one failure back into a session of the scripted run
// (runCLISession), and returns what it changed.
type mutation struct {
	name string
	edit func(t *testing.T, fs *files, ids ids) []string
}

// ids are the scripted run's task ids.
type ids struct{ agent, bash string }

func timeOf(t *testing.T, raw string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, decode(raw).Timestamp)
	if err != nil {
		t.Fatalf("timestamp of %s: %v", shorten(raw, 100), err)
	}
	return at
}

var mutations = []mutation{
	{
		// The follow-on's notification is never queued: its enqueue, and
		// the wake turn it started (the dequeue, the user entry built from
		// it, and the reply), are gone.
		name: "stranded-reply",
		edit: func(t *testing.T, fs *files, ids ids) []string {
			enq := fs.find(t, 0, "the follow-on's notification", isEnqueueOf("<result>SUB-FOLLOWON"))
			deq := fs.find(t, enq+1, "its dequeue", isDequeue)
			user := fs.find(t, deq, "its user entry", isNotificationEntry("SUB-FOLLOWON"))
			reply := fs.find(t, user, "the wake turn's reply", isAssistantSaying("MAIN: got the follow-on reply"))
			idx := []int{enq, deq, user, reply}
			for i := user + 1; i < reply; i++ {
				idx = append(idx, i) // the wake turn's request lines
			}
			return []string{fs.deleteMain(idx...)}
		},
	},
	{
		// The Bash task's notification, queued while the session is idle,
		// is dequeued ten minutes late: the dequeue and everything after it
		// moved by ten minutes.
		name: "missed-wake",
		edit: func(t *testing.T, fs *files, ids ids) []string {
			enq := fs.find(t, 0, "the Bash task's notification", isEnqueueOf("<task-id>"+ids.bash+"</task-id>"))
			deq := fs.find(t, enq+1, "its dequeue", isDequeue)
			return []string{fs.shiftFrom(t, timeOf(t, fs.lines[fs.main][deq]), 10*time.Minute)}
		},
	},
	{
		// The Bash task's notification stays queued: its dequeue, its user
		// entry and the wake turn are gone, while the subagent's
		// notification after it is dequeued.
		name: "held-continuation",
		edit: func(t *testing.T, fs *files, ids ids) []string {
			enq := fs.find(t, 0, "the Bash task's notification", isEnqueueOf("<task-id>"+ids.bash+"</task-id>"))
			deq := fs.find(t, enq+1, "its dequeue", isDequeue)
			reply := fs.find(t, deq, "the wake turn's reply", isAssistantSaying("MAIN: the command is done"))
			var idx []int
			for i := deq; i <= reply; i++ {
				idx = append(idx, i)
			}
			return []string{fs.deleteMain(idx...)}
		},
	},
	{
		// The subagent's first run is never notified: the enqueue of its
		// notification, the dequeue and the user entry built from it are
		// gone.
		name: "stuck-subagent",
		edit: func(t *testing.T, fs *files, ids ids) []string {
			enq := fs.find(t, 0, "the subagent's first notification", isEnqueueOf("<result>SUB-FIRST"))
			deq := fs.find(t, enq+1, "its dequeue", isDequeue)
			user := fs.find(t, deq, "its user entry", isNotificationEntry("SUB-FIRST"))
			return []string{fs.deleteMain(enq, deq, user)}
		},
	},
}
