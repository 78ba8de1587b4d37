package codex

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider/providertest"
)

// An idle process is released (IdleRelease), but not while work it runs
// is live: a background command defers the release until it ended and its
// wake turn is over. The next prompt starts a new process, which resumes
// the thread: the model sees the history.
func TestIdleRelease(t *testing.T) {
	r := newRig(t, func(o *Options) { o.IdleRelease = 300 * time.Millisecond })
	r.srv.Fallback(func(q *providertest.Request) (providertest.Reply, bool) {
		switch last := q.LastUserText(); {
		case woken(q) && strings.Contains(last, "BG-DONE"):
			return say("MAIN: woke"), true
		case answersTool(q):
			return say("MAIN: launched"), true
		case strings.Contains(last, "start a command"):
			return call("call_idle_1", "exec_command", `{"cmd":"sleep 2; echo BG-DONE","yield_time_ms":250}`), true
		case strings.Contains(last, "after the release"):
			history := ""
			for _, m := range q.Messages {
				for _, b := range m.Content {
					history += b.Text + b.Content
				}
			}
			if strings.Contains(history, "MAIN: woke") {
				return say("MAIN: resumed with the history"), true
			}
			return say("MAIN: resumed without the history"), true
		}
		return providertest.Reply{}, false
	})
	r.start("start a command")
	r.waitRunEnded(core.MainAgent, "MAIN: launched")
	first := r.state().Agents[core.MainAgent].PID
	r.waitRunEnded(core.MainAgent, "MAIN: woke")
	// The release came after the wake turn, not while the command ran.
	var released int64
	r.waitEvent("the process's end", func(typ string, data []byte) bool {
		var e struct {
			Running *bool `json:"running"`
		}
		return typ == "provider.process" && json.Unmarshal(data, &e) == nil && e.Running != nil && !*e.Running
	})
	s := r.state()
	main := s.Agents[core.MainAgent]
	if len(main.Runs) != 2 || main.Runs[1].Kind != core.RunProviderWake || main.Runs[1].Status != core.RunCompleted {
		t.Fatalf("runs before the release: %+v", main.Runs)
	}
	if st := task(s, core.TaskShell); st == nil || st.Status != core.TaskCompleted {
		t.Fatalf("the command: %+v", st)
	}
	if released = r.drv.Stats().IdleReleases; released != 1 {
		t.Fatalf("idle releases %d, want 1", released)
	}
	if _, err := r.rt.Prompt(r.ctx, vigil.SessionID(r.sess), &vigil.PromptParams{Text: "after the release"}); err != nil {
		t.Fatal(err)
	}
	r.waitRunEnded(core.MainAgent, "MAIN: resumed with the history")
	if second := r.state().Agents[core.MainAgent].PID; second == first || second <= 0 {
		t.Fatalf("the prompt after the release ran in process %d (first %d)", second, first)
	}
}
