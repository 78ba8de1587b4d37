package mcpserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/text"
)

// Notification is one item of the caller's inbox: most often the
// notification that a run of one of its tasks ended.
type Notification struct {
	ID         string            `json:"id" jsonschema:"pass it in ack (of your next vigil_wait, or vigil_ack) to acknowledge it; until then every wait returns it again"`
	Kind       string            `json:"kind" jsonschema:"notification (a run of your task ended), message (an agent wrote to you) or prompt (a person wrote to you)"`
	Task       string            `json:"task,omitempty" jsonschema:"the task, <session>/<task>"`
	Key        string            `json:"key,omitempty" jsonschema:"the notification's unique key, <session>/<task>#<run>: one notification per run"`
	Agent      string            `json:"agent,omitempty" jsonschema:"the agent's name"`
	Run        int               `json:"run,omitempty" jsonschema:"the run that ended"`
	Status     string            `json:"status,omitempty" jsonschema:"how the run ended: completed, failed, cancelled or interrupted"`
	Reply      string            `json:"reply,omitempty" jsonschema:"the run's final reply"`
	Error      string            `json:"error,omitempty"`
	ExitCode   *int              `json:"exit_code,omitempty" jsonschema:"a shell task's exit code"`
	Output     string            `json:"output,omitempty" jsonschema:"the tail of a shell task's output"`
	Answered   []AnsweredMessage `json:"answered,omitempty" jsonschema:"the messages this run took in and answered"`
	LiveTasks  []string          `json:"live_tasks,omitempty" jsonschema:"tasks of the agent's own still running: it notifies again when they finish"`
	From       string            `json:"from,omitempty" jsonschema:"who wrote a message or prompt"`
	Text       string            `json:"text,omitempty" jsonschema:"the text of a message or prompt"`
	DurationMS int64             `json:"duration_ms,omitempty"`
	Repeat     bool              `json:"repeat,omitempty" jsonschema:"an earlier wait returned it already and it was not acknowledged"`
}

// AnsweredMessage is a message a run answered.
type AnsweredMessage struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// TaskInfo summarises a task.
type TaskInfo struct {
	Task        string `json:"task" jsonschema:"the task id, <session>/<task>"`
	Kind        string `json:"kind" jsonschema:"agent or shell"`
	Agent       string `json:"agent,omitempty" jsonschema:"the agent's name"`
	Description string `json:"description,omitempty"`
	State       string `json:"state" jsonschema:"running (a run is in progress), queued (items wait for its next run), waiting (on tasks of its own), idle, closed; for a shell task its status"`
	Run         int    `json:"run,omitempty" jsonschema:"the run in progress, else the last run"`
	LastStatus  string `json:"last_status,omitempty" jsonschema:"how the last run ended"`
	Pending     int    `json:"pending_notifications,omitempty" jsonschema:"notifications of this task you have not acknowledged"`
	Detail      string `json:"detail,omitempty" jsonschema:"what it is doing or waiting for"`
	Provider    string `json:"provider,omitempty"`
	Model       string `json:"model,omitempty"`
	Created     string `json:"created,omitempty"`
}

// RunInfo is one run of an agent.
type RunInfo struct {
	Run      int      `json:"run"`
	Kind     string   `json:"kind" jsonschema:"what started it: spawn, message, notification, ..."`
	Status   string   `json:"status"`
	Reply    string   `json:"reply,omitempty"`
	Error    string   `json:"error,omitempty"`
	Answered []string `json:"answered,omitempty" jsonschema:"ids of the messages it answered"`
	Started  string   `json:"started"`
	Ended    string   `json:"ended,omitempty"`
}

// NoteInfo is a notification of a task, acknowledged or not.
type NoteInfo struct {
	Key          string `json:"key"`
	Status       string `json:"status"`
	Acknowledged bool   `json:"acknowledged"`
	Dropped      string `json:"dropped,omitempty"`
}

// QueueItem is an item queued in an inbox of one of the caller's sessions.
type QueueItem struct {
	ID          string `json:"id" jsonschema:"the item, <session>/<item>"`
	Task        string `json:"task,omitempty" jsonschema:"the task whose agent's inbox holds it; empty for your own inbox"`
	Agent       string `json:"agent" jsonschema:"whose inbox: an agent's name, or 'you'"`
	Kind        string `json:"kind" jsonschema:"prompt, spawn, message, notification, timer or continuation"`
	Priority    string `json:"priority"`
	From        string `json:"from,omitempty"`
	Text        string `json:"text,omitempty"`
	Held        bool   `json:"held,omitempty" jsonschema:"held by a hold of the session's user prompts"`
	Cancellable bool   `json:"cancellable,omitempty" jsonschema:"vigil_queue_cancel can remove it (prompts and continuations; messages and notifications are always delivered)"`
	Enqueued    string `json:"enqueued"`
}

// AgentWhy says what an agent is doing or waiting on, blockers first.
type AgentWhy struct {
	Task     string   `json:"task,omitempty" jsonschema:"the agent's task, <session>/<task>; empty for you"`
	Agent    string   `json:"agent" jsonschema:"the agent's name, or 'you'"`
	State    string   `json:"state" jsonschema:"idle, running, waiting (for a permission answer) or closed"`
	Kind     string   `json:"kind" jsonschema:"approval, budget, blocked, backoff, held, caller, provider, slot, model, subagent, task, tool, tasks, timer, ready, idle or closed"`
	Text     string   `json:"text" jsonschema:"what it is doing or waiting on, in one line (times UTC)"`
	NeedsYou bool     `json:"needs_you,omitempty" jsonschema:"only a person can move it on: answer its permission request (vigil_approve), raise its budget, or retry it"`
	HoldsUp  []string `json:"holds_up,omitempty" jsonschema:"the queued items that wait on it, <session>/<item>"`
	Since    string   `json:"since,omitempty"`
	Until    string   `json:"until,omitempty" jsonschema:"its deadline, if it has one (a retry, an approval's deadline)"`
}

// QueueStatus says why a non-empty inbox is not draining.
type QueueStatus struct {
	Task     string `json:"task,omitempty"`
	Agent    string `json:"agent"`
	Items    int    `json:"items"`
	Held     int    `json:"held,omitempty"`
	Draining bool   `json:"draining"`
	Reason   string `json:"reason"`
	ClearsOn string `json:"clears_on,omitempty"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// itemView turns an item of the caller's inbox into what wait returns; its
// notification's details need a view with needLists.
func (v *view) itemView(it *vigil.InboxItem) Notification {
	n := Notification{ID: globalID(v.id, string(it.ID)), Kind: string(it.Kind), Text: it.Text, From: it.From}
	if a := v.agents[vigil.AgentID(it.From)]; a != nil {
		n.From = a.Name
		if a.Task != "" {
			n.Task = globalID(v.id, string(a.Task))
		}
	}
	if it.Kind != vigil.KindNotification || it.Note == nil {
		return n
	}
	key := globalID(v.id, it.Note.String())
	n.ID, n.Key, n.Task, n.Run, n.Text, n.From = key, key, globalID(v.id, string(it.Note.Task)), it.Note.Run, "", ""
	note := v.notes[*it.Note]
	if note == nil {
		return n
	}
	n.Agent, n.Status, n.Reply, n.Error = note.AgentName, note.Status, note.Reply, note.Error
	n.ExitCode, n.Output, n.DurationMS = note.ExitCode, note.Output, note.Duration.Milliseconds()
	for _, m := range note.Answered {
		am := AnsweredMessage{ID: globalID(v.id, string(m))}
		if msg := v.msgs[m]; msg != nil {
			am.Text = msg.Text
		}
		n.Answered = append(n.Answered, am)
	}
	for _, t := range note.LiveTasks {
		n.LiveTasks = append(n.LiveTasks, globalID(v.id, string(t)))
	}
	return n
}

// callerItems returns the caller's inbox items that a wait may return:
// all but held prompts, those of the given tasks only when tasks is set.
func (v *view) callerItems(tasks map[vigil.TaskID]bool) []*vigil.InboxItem {
	main := v.agents[vigil.MainAgent]
	if main == nil || main.State == vigil.AgentClosed {
		return nil
	}
	var out []*vigil.InboxItem
	for i := range main.Inbox {
		it := &main.Inbox[i]
		if it.Held {
			continue
		}
		if tasks != nil {
			var task vigil.TaskID
			switch {
			case it.Note != nil:
				task = it.Note.Task
			case v.agents[vigil.AgentID(it.From)] != nil:
				task = v.agents[vigil.AgentID(it.From)].Task
			}
			if !tasks[task] {
				continue
			}
		}
		out = append(out, it)
	}
	return out
}

// busy reports whether an agent, or an agent it owns, has a run in
// progress, queued items, a live shell task or a timer: whether a
// notification can still come from it without anyone's help. It needs a
// view with needRuns.
func (v *view) busy(a *vigil.Agent) bool {
	if a == nil || a.State == vigil.AgentClosed {
		return false
	}
	if a.Run != nil || len(a.Inbox) > 0 || v.timers[a.ID] > 0 {
		return true
	}
	for i := range v.Tasks {
		if t := &v.Tasks[i]; t.Owner == a.ID && t.Kind == vigil.TaskShell && live(t) {
			return true
		}
	}
	for i := range v.Agents {
		if b := &v.Agents[i]; b.Owner == a.ID && v.busy(b) {
			return true
		}
	}
	return false
}

// pendingOf counts the caller's unacknowledged notifications of a task.
func (v *view) pendingOf(task vigil.TaskID) int {
	n := 0
	if main := v.agents[vigil.MainAgent]; main != nil {
		for _, it := range main.Inbox {
			if it.Note != nil && it.Note.Task == task {
				n++
			}
		}
	}
	return n
}

// taskView summarises a task of a caller's session; it needs a view with
// needRuns.
func (v *view) taskView(t *vigil.Task) TaskInfo {
	tv := TaskInfo{Task: globalID(v.id, string(t.ID)), Kind: string(t.Kind), Description: t.Description, State: string(t.Status),
		Pending: v.pendingOf(t.ID), Created: stamp(t.Started)}
	if t.Kind == vigil.TaskShell {
		tv.Detail = t.Command
		if t.ExitCode != nil {
			tv.Detail = fmt.Sprintf("%s (exit %d)", t.Command, *t.ExitCode)
		}
		return tv
	}
	a := v.agents[t.Agent]
	if a == nil {
		return tv
	}
	tv.Agent, tv.Provider, tv.Model = a.Name, a.Provider, a.Model
	if r := v.lastRun(a.ID); r != nil {
		tv.Run, tv.LastStatus = r.Seq, string(r.Status)
	}
	switch {
	case a.State == vigil.AgentClosed || v.Session.Closed:
		tv.State = "closed"
	case a.Run != nil:
		tv.State, tv.Run = "running", a.Run.Seq
		tv.Detail = runDetail(a)
	case len(a.Inbox) > 0:
		tv.State = "queued"
		tv.Detail = a.Why.Text
	case v.busy(a):
		tv.State = "waiting"
		tv.Detail = "its run ended; tasks of its own are still running, and it wakes (and notifies you again) when they finish"
	default:
		tv.State = "idle"
		tv.Detail = "finished; " + ToolSend + " resumes it, " + ToolClose + " ends it"
	}
	return tv
}

// runDetail says what an agent's run in progress is doing: its Why.
func runDetail(a *vigil.Agent) string {
	r := a.Run
	return fmt.Sprintf("run %d (started by %s), round %d: %s", r.Seq, r.Kind, r.Round, a.Why.Text)
}

// whyOf is an agent's Why as the caller reads it: the items it holds up
// are named in the caller's ids.
func (v *view) whyOf(a *vigil.Agent) AgentWhy {
	w := AgentWhy{Agent: a.Name, State: string(a.State), Kind: a.Why.Kind, Text: a.Why.Text, NeedsYou: a.Why.NeedsYou,
		Since: stamp(a.Why.Since), Until: stamp(a.Why.Until)}
	if a.ID == vigil.MainAgent {
		w.Agent = "you"
	} else if a.Task != "" {
		w.Task = globalID(v.id, string(a.Task))
	}
	for _, id := range a.Why.HoldsUp {
		w.HoldsUp = append(w.HoldsUp, globalID(v.id, string(id)))
	}
	return w
}

// whys lists what every agent of the session is doing or waiting on.
func (v *view) whys() []AgentWhy {
	out := make([]AgentWhy, 0, len(v.Agents))
	for i := range v.Agents {
		out = append(out, v.whyOf(&v.Agents[i]))
	}
	return out
}

// runsOf lists an agent's runs, the one in progress last; it needs a view
// with needRuns.
func (v *view) runsOf(a *vigil.Agent) []RunInfo {
	out := []RunInfo{}
	for _, r := range v.runs[a.ID] {
		ri := RunInfo{Run: r.Seq, Kind: string(r.Kind), Status: string(r.Status), Reply: r.Reply, Error: r.Error,
			Started: stamp(r.Started), Ended: stamp(r.Ended)}
		for _, m := range r.Answered {
			ri.Answered = append(ri.Answered, globalID(v.id, string(m)))
		}
		out = append(out, ri)
	}
	return out
}

// notesOf lists a task's notifications; it needs a view with needLists.
func (v *view) notesOf(task vigil.TaskID) []NoteInfo {
	out := []NoteInfo{}
	for _, n := range v.Notifications {
		if n.Key.Task == task {
			out = append(out, NoteInfo{Key: globalID(v.id, n.Key.String()), Status: n.Status, Acknowledged: n.DeliveredRun > 0, Dropped: n.Dropped})
		}
	}
	return out
}

// queueOf lists the queued items of a session's inboxes, the caller's
// included.
func (v *view) queueOf() []QueueItem {
	var out []QueueItem
	for _, a := range v.Agents {
		for _, it := range a.Inbox {
			q := QueueItem{ID: globalID(v.id, string(it.ID)), Agent: a.Name, Kind: string(it.Kind), Priority: string(it.Priority),
				From: it.From, Text: text.Cut(it.Text, 200), Held: it.Held,
				Cancellable: it.Kind == vigil.KindPrompt || it.Kind == vigil.KindContinuation, Enqueued: stamp(it.Enqueued)}
			if a.ID == vigil.MainAgent {
				q.Agent = "you"
			} else if a.Task != "" {
				q.Task = globalID(v.id, string(a.Task))
			}
			if from := v.agents[vigil.AgentID(it.From)]; from != nil {
				q.From = from.Name
				if from.ID == vigil.MainAgent {
					q.From = "you"
				}
			}
			if it.Note != nil {
				// The item's text is the notification's summary.
				q.Text = "notification " + globalID(v.id, it.Note.String()) + ": " + text.Cut(it.Text, 200)
			}
			out = append(out, q)
		}
	}
	return out
}

// queueStatus says why each non-empty inbox of a session is not draining.
func (v *view) queueStatus() []QueueStatus {
	var out []QueueStatus
	for _, is := range v.Status {
		q := QueueStatus{Agent: is.Name, Items: is.Items, Held: is.Held, Draining: is.Draining, Reason: is.Reason, ClearsOn: is.ClearsOn}
		if is.Agent == vigil.MainAgent {
			q.Agent = "you"
			q.Reason = "your notifications wait until you acknowledge them (" + ToolWait + ", then its ack)"
		} else if a := v.agents[is.Agent]; a != nil && a.Task != "" {
			q.Task = globalID(v.id, string(a.Task))
		}
		out = append(out, q)
	}
	return out
}

// renderTranscript writes an agent's conversation as plain text: what
// vigil_output pages through for an agent task.
func renderTranscript(transcript []chat.Message) string {
	var b strings.Builder
	for _, m := range transcript {
		fmt.Fprintf(&b, "## %s\n", m.Role)
		for _, c := range m.Content {
			switch c.Type {
			case chat.BlockText:
				b.WriteString(c.Text)
				b.WriteString("\n")
			case chat.BlockToolUse:
				fmt.Fprintf(&b, "[tool call %s %s]\n", c.Name, c.Input)
			case chat.BlockToolResult:
				mark := "result"
				if c.IsError {
					mark = "error"
				}
				fmt.Fprintf(&b, "[tool %s]\n%s\n", mark, c.Content)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
