package mcpserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// Notification is one item of the caller's inbox: most often the
// notification that a run of one of its tasks ended.
type Notification struct {
	ID         string            `json:"id" jsonschema:"pass it in ack (of your next wait, or the ack tool) to acknowledge it; until then every wait returns it again"`
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
	Cancellable bool   `json:"cancellable,omitempty" jsonschema:"queue_cancel can remove it (prompts and continuations; messages and notifications are always delivered)"`
	Enqueued    string `json:"enqueued"`
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

func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// itemView turns an item of the caller's inbox into what wait returns.
func itemView(st *core.State, it *core.Item) Notification {
	sid := st.Session.ID
	n := Notification{ID: globalID(sid, string(it.ID)), Kind: string(it.Kind), Text: it.Text, From: it.From}
	if a := st.Agents[core.AgentID(it.From)]; a != nil {
		n.From = a.Name
		if a.Task != "" {
			n.Task = globalID(sid, string(a.Task))
		}
	}
	if it.Kind != core.KindNotification || it.Note == nil {
		return n
	}
	key := globalID(sid, it.Note.String())
	n.ID, n.Key, n.Task, n.Run, n.Text, n.From = key, key, globalID(sid, string(it.Note.Task)), it.Note.Run, "", ""
	note := st.Note(*it.Note)
	if note == nil {
		return n
	}
	n.Agent, n.Status, n.Reply, n.Error = note.AgentName, note.Status, note.Reply, note.Error
	n.ExitCode, n.Output, n.DurationMS = note.ExitCode, note.Output, note.Duration.Milliseconds()
	for _, m := range note.Answered {
		am := AnsweredMessage{ID: globalID(sid, string(m))}
		if msg := st.Msgs[m]; msg != nil {
			am.Text = msg.Text
		}
		n.Answered = append(n.Answered, am)
	}
	for _, t := range note.LiveTasks {
		n.LiveTasks = append(n.LiveTasks, globalID(sid, string(t)))
	}
	return n
}

// callerItems returns the caller's inbox items that a wait may return:
// all but held prompts, those of the given tasks only when tasks is set.
func callerItems(st *core.State, tasks map[core.TaskID]bool) []*core.Item {
	main := st.Agents[core.MainAgent]
	if main == nil || main.State == core.AgentClosed {
		return nil
	}
	var out []*core.Item
	for _, it := range main.Inbox {
		if st.Hold != nil && it.Holdable() {
			continue
		}
		if tasks != nil {
			var task core.TaskID
			switch {
			case it.Note != nil:
				task = it.Note.Task
			case st.Agents[core.AgentID(it.From)] != nil:
				task = st.Agents[core.AgentID(it.From)].Task
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
// notification can still come from it without anyone's help.
func busy(st *core.State, a *core.Agent) bool {
	if a == nil || a.State == core.AgentClosed {
		return false
	}
	if a.Run != nil || len(a.Inbox) > 0 {
		return true
	}
	for _, id := range st.TaskOrder {
		if t := st.Tasks[id]; t.Owner == a.ID && t.Kind == core.TaskShell && t.Status.Live() {
			return true
		}
	}
	for _, t := range st.Timers {
		if t.Agent == a.ID {
			return true
		}
	}
	for _, id := range st.Order {
		if b := st.Agents[id]; b.Owner == a.ID && busy(st, b) {
			return true
		}
	}
	return false
}

// pendingOf counts the caller's unacknowledged notifications of a task.
func pendingOf(st *core.State, task core.TaskID) int {
	n := 0
	if main := st.Agents[core.MainAgent]; main != nil {
		for _, it := range main.Inbox {
			if it.Note != nil && it.Note.Task == task {
				n++
			}
		}
	}
	return n
}

// taskView summarises a task of a caller's session.
func taskView(st *core.State, t *core.Task) TaskInfo {
	sid := st.Session.ID
	v := TaskInfo{Task: globalID(sid, string(t.ID)), Kind: string(t.Kind), Description: t.Description, State: string(t.Status),
		Pending: pendingOf(st, t.ID), Created: stamp(t.Started)}
	if t.Kind == core.TaskShell {
		v.Detail = t.Command
		if t.ExitCode != nil {
			v.Detail = fmt.Sprintf("%s (exit %d)", t.Command, *t.ExitCode)
		}
		return v
	}
	a := st.Agents[t.Agent]
	if a == nil {
		return v
	}
	v.Agent, v.Provider, v.Model = a.Name, a.Provider, a.Model
	if n := len(a.Runs); n > 0 {
		v.Run, v.LastStatus = a.Runs[n-1].Seq, string(a.Runs[n-1].Status)
	}
	switch {
	case a.State == core.AgentClosed || st.Session.Closed:
		v.State = "closed"
	case a.Run != nil:
		v.State, v.Run = "running", a.Run.Seq
		v.Detail = runDetail(st, a)
	case len(a.Inbox) > 0:
		v.State = "queued"
		v.Detail = fmt.Sprintf("%d item(s) wait for its next run", len(a.Inbox))
	case busy(st, a):
		v.State = "waiting"
		v.Detail = "its run ended; tasks of its own are still running, and it wakes (and notifies you again) when they finish"
	default:
		v.State = "idle"
		v.Detail = "finished; send_message resumes it"
	}
	return v
}

// runDetail says what an agent's run in progress is doing.
func runDetail(st *core.State, a *core.Agent) string {
	r := a.Run
	d := fmt.Sprintf("run %d (started by %s), round %d", r.Seq, r.Kind, r.Round)
	switch {
	case r.Call != nil:
		d += fmt.Sprintf(", model call %s", r.Call.State)
		if r.Call.RetryReason != "" {
			d += " (" + r.Call.RetryReason + ")"
		}
	case a.State == core.AgentWaiting:
		d += ", waiting for a permission answer"
	default:
		var names []string
		for _, tc := range r.Tools {
			if !tc.Done {
				names = append(names, tc.Name)
			}
		}
		if len(names) > 0 {
			d += ", running tools: " + strings.Join(names, ", ")
		}
	}
	if len(a.Inbox) > 0 {
		d += fmt.Sprintf("; %d item(s) queued", len(a.Inbox))
	}
	return d
}

// runsOf lists an agent's runs, the one in progress last.
func runsOf(st *core.State, a *core.Agent) []RunInfo {
	sid := st.Session.ID
	out := []RunInfo{}
	for _, r := range a.Runs {
		ri := RunInfo{Run: r.Seq, Kind: string(r.Kind), Status: string(r.Status), Reply: r.Reply, Error: r.Error,
			Started: stamp(r.Started), Ended: stamp(r.Ended)}
		for _, m := range r.Answered {
			ri.Answered = append(ri.Answered, globalID(sid, string(m)))
		}
		out = append(out, ri)
	}
	if r := a.Run; r != nil {
		ri := RunInfo{Run: r.Seq, Kind: string(r.Kind), Status: string(core.RunRunning), Started: stamp(r.Started)}
		for _, m := range r.Answered {
			ri.Answered = append(ri.Answered, globalID(sid, string(m)))
		}
		out = append(out, ri)
	}
	return out
}

// notesOf lists a task's notifications.
func notesOf(st *core.State, task core.TaskID) []NoteInfo {
	out := []NoteInfo{}
	for _, k := range st.NoteOrder {
		if k.Task != task {
			continue
		}
		n := st.Notes[k]
		out = append(out, NoteInfo{Key: globalID(st.Session.ID, k.String()), Status: n.Status, Acknowledged: n.DeliveredRun > 0, Dropped: n.Dropped})
	}
	return out
}

// queueOf lists the queued items of a session's inboxes, the caller's
// included.
func queueOf(st *core.State) []QueueItem {
	sid := st.Session.ID
	var out []QueueItem
	for _, id := range st.Order {
		a := st.Agents[id]
		for _, it := range a.Inbox {
			q := QueueItem{ID: globalID(sid, string(it.ID)), Agent: a.Name, Kind: string(it.Kind), Priority: string(it.Priority),
				From: it.From, Text: excerpt(it.Text, 200), Held: st.Hold != nil && it.Holdable(),
				Cancellable: it.Kind == core.KindPrompt || it.Kind == core.KindContinuation, Enqueued: stamp(it.Enqueued)}
			if id == core.MainAgent {
				q.Agent = "you"
			} else if a.Task != "" {
				q.Task = globalID(sid, string(a.Task))
			}
			if from := st.Agents[core.AgentID(it.From)]; from != nil {
				q.From = from.Name
				if from.ID == core.MainAgent {
					q.From = "you"
				}
			}
			if it.Note != nil {
				q.Text = "notification " + globalID(sid, it.Note.String())
			}
			out = append(out, q)
		}
	}
	return out
}

// queueStatus says why each non-empty inbox of a session is not draining.
func queueStatus(st *core.State) []QueueStatus {
	var out []QueueStatus
	for _, is := range core.Status(st) {
		q := QueueStatus{Agent: is.Name, Items: is.Items, Held: is.Held, Draining: is.Draining, Reason: is.Reason, ClearsOn: is.ClearsOn}
		if is.Agent == core.MainAgent {
			q.Agent = "you"
			q.Reason = "your notifications wait until you acknowledge them (wait, then ack)"
		} else if a := st.Agents[is.Agent]; a != nil && a.Task != "" {
			q.Task = globalID(st.Session.ID, string(a.Task))
		}
		out = append(out, q)
	}
	return out
}

// renderTranscript writes an agent's conversation as plain text: what
// task_output pages through for an agent task.
func renderTranscript(a *core.Agent) string {
	var b strings.Builder
	for _, m := range a.Transcript {
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
