package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/text"
)

// Context management. Each agent's context size is known: what the
// provider reported for its last round, plus an estimate of what was added
// since (chat.EstimateTokens). Past Config.CompactAt of the model's window,
// or when the provider refuses a prompt as too long, the agent's next round
// starts with a compaction: a model call that summarises the older turns
// (with the same tools, which it is asked not to call).
// The transcript keeps everything; what is sent changes: a header (the
// summary and a task ledger built from vigil's state, not from the summary)
// and the transcript from the cut on. The cut is at an answer of the model,
// so no tool result is separated from its call, and the recent turns are
// kept whole.

// PurposeCompact marks a CallModel that asks for a summary.
const PurposeCompact = "compact"

// Compaction is an agent's latest context compaction.
type Compaction struct {
	// Seq counts the agent's compactions, from 1.
	Seq int `json:"seq"`
	// Upto is where the transcript is sent from: Transcript[:Upto] is in
	// the summary. Transcript[Upto] is an answer of the model.
	Upto    int    `json:"upto"`
	Summary string `json:"summary"`
	Ledger  Ledger `json:"ledger"`
	// Before is the estimated context when it was made; After what the
	// header and the kept turns take.
	Before int64     `json:"before"`
	After  int64     `json:"after"`
	At     time.Time `json:"at"`
}

// Ledger is what vigil knows an agent has in flight, given to the model
// after a compaction so that it neither forgets nor repeats work.
type Ledger struct {
	Tasks     []LedgerTask `json:"tasks,omitempty"`
	Awaiting  []MsgID      `json:"awaiting,omitempty"`
	Unseen    []NoteKey    `json:"unseen,omitempty"`
	Approvals []ApprovalID `json:"approvals,omitempty"`
}

// LedgerTask is one task of the ledger.
type LedgerTask struct {
	Task   TaskID   `json:"task"`
	Kind   TaskKind `json:"kind"`
	Agent  AgentID  `json:"agent,omitempty"`
	Name   string   `json:"name,omitempty"`
	State  string   `json:"state"`
	Asked  string   `json:"asked"`
	Cmd    string   `json:"command,omitempty"`
	Output string   `json:"output_file,omitempty"`
}

// ContextCompacted records a compaction of an agent's context.
type ContextCompacted struct {
	Agent      AgentID    `json:"agent"`
	Compaction Compaction `json:"compaction"`
}

// Type implements Body: the name of the event.
func (*ContextCompacted) Type() string { return "context.compacted" }
func (e *ContextCompacted) apply(s *State, _ time.Time) {
	a := s.Agents[e.Agent]
	c := e.Compaction
	a.Compacted = &c
	a.Context = ContextSize{At: c.Upto}
}

// ContextSize is what an agent's context took at its last model round.
type ContextSize struct {
	// Reported is the prompt and answer tokens the provider counted for
	// the last round; At is the transcript length they cover.
	Reported int64 `json:"reported,omitempty"`
	At       int   `json:"at,omitempty"`
}

// contextTokens estimates what a's next round sends.
func (s *State) contextTokens(a *Agent) int64 {
	at := min(a.Context.At, len(a.Transcript))
	n := a.Context.Reported + chat.EstimateTokens(a.Transcript[at:])
	if a.Context.Reported == 0 && a.Compacted != nil {
		n += chat.EstimateTokens([]chat.Message{compactHeader(a.Compacted)})
	}
	return n
}

// ContextTokens is the estimated size of what agent a's next model round
// sends, in tokens.
func ContextTokens(s *State, a *Agent) int64 { return s.contextTokens(a) }

// window returns the context window of a's model, 0 when unknown.
func (st *stepper) window(a *Agent) int {
	if st.cfg.ContextWindow == nil {
		return 0
	}
	return st.cfg.ContextWindow(st.modelOf(a))
}

// cutPoint returns where a compaction of a would cut: the earliest answer
// of the model after the current cut whose tail fits in a quarter of the
// window, else the last answer; 0 when no cut makes progress.
func (st *stepper) cutPoint(a *Agent, window int) int {
	from := 1
	if a.Compacted != nil {
		from = a.Compacted.Upto + 1
	}
	keep := int64(window) / 4
	last := 0
	var tail int64
	cut := 0
	for i := len(a.Transcript) - 1; i >= from; i-- {
		tail += chat.EstimateTokens(a.Transcript[i : i+1])
		if a.Transcript[i].Role != chat.RoleAssistant {
			continue
		}
		if last == 0 {
			last = i
		}
		if tail > keep {
			break
		}
		cut = i
	}
	if cut == 0 {
		cut = last
	}
	return cut
}

// needsCompaction reports whether a's next round should start with a
// compaction: its context is past the threshold of a known window and a
// cut would make progress.
func (st *stepper) needsCompaction(a *Agent) bool {
	w := st.window(a)
	if w <= 0 || float64(st.s.contextTokens(a)) < st.cfg.CompactAt*float64(w) {
		return false
	}
	return st.cutPoint(a, w) > 0
}

// beginCompaction starts the model call that summarises a's older turns.
func (st *stepper) beginCompaction(a *Agent, why string) bool {
	w := st.window(a)
	if w <= 0 {
		// An unknown window: a refusal says the prompt is too long; keep
		// a quarter of what was sent.
		w = int(st.s.contextTokens(a))
	}
	cut := st.cutPoint(a, w)
	if cut == 0 {
		return false
	}
	state := CallInFlight
	if st.cfg.MaxConcurrentCalls > 0 && st.inFlight() >= st.cfg.MaxConcurrentCalls {
		state = CallWaitingSlot
	}
	id := CallID("c" + strconv.Itoa(st.s.Counters.Call+1))
	st.emit(&ModelCallStarted{Agent: a.ID, Call: id, Round: a.Run.Round + 1, State: state, Purpose: PurposeCompact, Cut: cut, Reason: why})
	if state == CallInFlight {
		st.effect(st.callModel(a))
	}
	return true
}

// compactMessages is the prompt of a compaction call: what is sent today
// up to the cut, then the request for a summary.
func compactMessages(a *Agent, cut int) []chat.Message {
	var msgs []chat.Message
	from := 0
	if c := a.Compacted; c != nil {
		msgs = append(msgs, compactHeader(c))
		from = c.Upto
	}
	msgs = append(msgs, a.Transcript[from:cut]...)
	msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text(compactRequest)}})
	return msgs
}

const compactRequest = `[SYSTEM - CONTEXT COMPACTION - NOT USER INPUT]
The conversation above is being compacted to fit the model's context window. Write a summary that lets you continue the work without it: the goal and the user's instructions, decisions made and why, files and commands that matter, what is done and what is left. Do not list background tasks, subagents or messages in flight: vigil gives you an exact task ledger after the summary. Answer with the summary only; call no tools.`

// sentMessages is what a's next round sends: after a compaction, the
// header and the transcript from the cut on.
func sentMessages(a *Agent) []chat.Message {
	c := a.Compacted
	if c == nil {
		return a.Transcript[:len(a.Transcript):len(a.Transcript)]
	}
	msgs := make([]chat.Message, 0, len(a.Transcript)-c.Upto+1)
	msgs = append(msgs, compactHeader(c))
	return append(msgs, a.Transcript[c.Upto:]...)
}

// compactHeader is the first message sent after a compaction.
func compactHeader(c *Compaction) chat.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "[SYSTEM NOTIFICATION - NOT USER INPUT] The conversation was compacted (compaction %d): the earlier turns are summarised below, the recent ones follow whole.\n", c.Seq)
	b.WriteString("<context-summary>\n")
	b.WriteString(strings.TrimSpace(c.Summary))
	b.WriteString("\n</context-summary>\n")
	b.WriteString(renderLedger(&c.Ledger))
	return chat.Message{Role: chat.RoleUser, Content: []chat.Block{chat.Text(b.String())}}
}

// renderLedger renders the task ledger as the model reads it.
func renderLedger(l *Ledger) string {
	var b strings.Builder
	b.WriteString("<task-ledger>\nvigil's own record of what you have in flight, at the time of the compaction. It is exact, and it overrides the summary. Do not start these again: each task's notification will come; use TaskOutput or SendMessage to follow one up.\n")
	if len(l.Tasks) == 0 {
		b.WriteString("<tasks>none</tasks>\n")
	}
	for _, t := range l.Tasks {
		switch t.Kind {
		case TaskAgent:
			fmt.Fprintf(&b, "<task id=%q kind=\"agent\" agent=%q name=%q state=%q>asked: %s</task>\n", t.Task, t.Agent, t.Name, t.State, t.Asked)
		default:
			fmt.Fprintf(&b, "<task id=%q kind=\"shell\" state=%q output-file=%q>command: %s</task>\n", t.Task, t.State, t.Output, t.Cmd)
		}
	}
	if len(l.Awaiting) > 0 {
		fmt.Fprintf(&b, "<messages-awaiting-answers>%s</messages-awaiting-answers>\n", joinIDs(l.Awaiting))
	}
	if len(l.Unseen) > 0 {
		keys := make([]string, len(l.Unseen))
		for i, k := range l.Unseen {
			keys[i] = k.String()
		}
		fmt.Fprintf(&b, "<notifications-not-yet-seen>%s</notifications-not-yet-seen>\n", strings.Join(keys, " "))
	}
	if len(l.Approvals) > 0 {
		fmt.Fprintf(&b, "<pending-approvals>%s</pending-approvals>\n", joinIDs(l.Approvals))
	}
	b.WriteString("</task-ledger>")
	return b.String()
}

func joinIDs[T ~string](ids []T) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, " ")
}

// ledger builds a's task ledger from the state.
func (st *stepper) ledger(a *Agent) Ledger {
	s := st.s
	var l Ledger
	for _, id := range s.TaskOrder {
		t := s.Tasks[id]
		if t.Owner != a.ID {
			continue
		}
		switch t.Kind {
		case TaskShell:
			if t.Status.Live() {
				l.Tasks = append(l.Tasks, LedgerTask{Task: t.ID, Kind: TaskShell, State: string(t.Status), Cmd: t.Command, Output: t.OutputPath, Asked: t.Description})
			}
		case TaskAgent:
			ag := s.Agents[t.Agent]
			if ag == nil || ag.State == AgentClosed {
				continue
			}
			state := "idle"
			if ag.Run != nil {
				state = fmt.Sprintf("running run %d", ag.Run.Seq)
			} else if ag.Blocked != nil {
				state = "blocked: " + ag.Blocked.Reason
			}
			l.Tasks = append(l.Tasks, LedgerTask{Task: t.ID, Kind: TaskAgent, Agent: ag.ID, Name: ag.Name, State: state, Asked: text.FirstLine(t.Prompt, 300)})
		}
	}
	if st.seed(bugLedgerForgets) && len(l.Tasks) > 0 {
		l.Tasks = l.Tasks[:len(l.Tasks)-1] // the bug: the newest task is left out
	}
	for _, id := range sortedIDs(s.Msgs) {
		m := s.Msgs[id]
		if m.From == string(a.ID) && m.Outcome != OutcomeRejected && m.AnsweredBy == 0 {
			if to := s.Agents[m.To]; to != nil && to.State != AgentClosed {
				l.Awaiting = append(l.Awaiting, m.ID)
			}
		}
	}
	for _, k := range s.NoteOrder {
		if n := s.Notes[k]; n.Owner == a.ID && n.DeliveredRun == 0 && n.Dropped == "" {
			l.Unseen = append(l.Unseen, k)
		}
	}
	for _, id := range sortedApprovals(s) {
		if p := s.Approvals[id]; s.under(s.Agents[p.Agent], a) {
			l.Approvals = append(l.Approvals, id)
		}
	}
	return l
}

// compacted takes the summary a compaction call answered with.
func (st *stepper) compacted(a *Agent, call *Call, resp chat.Response) {
	var text []string
	for _, b := range resp.Content {
		if b.Type == chat.BlockText && strings.TrimSpace(b.Text) != "" {
			text = append(text, b.Text)
		}
	}
	summary := strings.Join(text, "\n")
	if summary == "" {
		summary = "(the model gave no summary)"
	}
	before := st.s.contextTokens(a)
	c := Compaction{Seq: 1, Upto: call.Cut, Summary: summary, Ledger: st.ledger(a), Before: before, At: st.now}
	if a.Compacted != nil {
		c.Seq = a.Compacted.Seq + 1
	}
	c.After = chat.EstimateTokens([]chat.Message{compactHeader(&c)}) + chat.EstimateTokens(a.Transcript[c.Upto:])
	st.emit(&ContextCompacted{Agent: a.ID, Compaction: c})
}

// duplicateTask returns a task of a that what is asked would repeat: an
// agent task with the same prompt whose agent is not closed (it may be
// messaged), or a live shell task with the same command. After a
// compaction a model may not recall what it started; the ledger says, and
// this refuses the repeat.
func (st *stepper) duplicateTask(a *Agent, kind TaskKind, asked string) *Task {
	for _, id := range st.s.TaskOrder {
		t := st.s.Tasks[id]
		if t.Owner != a.ID || t.Kind != kind {
			continue
		}
		switch kind {
		case TaskShell:
			if t.Status.Live() && t.Command == asked {
				return t
			}
		case TaskAgent:
			if ag := st.s.Agents[t.Agent]; ag != nil && t.Prompt == asked && ag.State != AgentClosed {
				return t
			}
		}
	}
	return nil
}
