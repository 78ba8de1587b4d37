package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/permission"
)

// dispatchTool handles one tool call of a model answer. vigil's
// orchestration tools are decided here; the others become ExecTool effects
// once permitted.
func (st *stepper) dispatchTool(a *Agent, u chat.Block) {
	tc := ToolCall{UseID: u.ID, Name: u.Name, Input: u.Input}
	switch u.Name {
	case "Agent":
		st.toolAgent(a, tc)
	case "SendMessage":
		st.toolSend(a, tc)
	case "TaskStop":
		st.toolTaskStop(a, tc)
	case "TaskOutput":
		st.toolTaskOutput(a, tc)
	case "ListAgents":
		st.startTool(a, tc)
		st.finishTool(a, tc.UseID, st.renderAgents(), false)
	case "ScheduleWakeup":
		st.toolWakeup(a, tc)
	default:
		st.toolGuarded(a, tc)
	}
}

func (st *stepper) startTool(a *Agent, tc ToolCall) {
	st.emit(&ToolCallStarted{Agent: a.ID, Call: tc})
}

func (st *stepper) finishTool(a *Agent, useID, result string, isError bool) {
	st.emit(&ToolCallFinished{Agent: a.ID, UseID: useID, Result: result, IsError: isError})
}

// rejectTool records a tool call that fails at once.
func (st *stepper) rejectTool(a *Agent, tc ToolCall, format string, args ...any) {
	st.startTool(a, tc)
	st.finishTool(a, tc.UseID, "Error: "+fmt.Sprintf(format, args...), true)
}

// decode parses a tool's JSON input strictly.
func decode(input json.RawMessage, v any) error {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid input: %v", err)
	}
	return nil
}

func (st *stepper) toolAgent(a *Agent, tc ToolCall) {
	var in struct {
		Description     string  `json:"description"`
		Prompt          string  `json:"prompt"`
		Name            string  `json:"name"`
		Model           string  `json:"model"`
		SubagentType    string  `json:"subagent_type"`
		RunInBackground bool    `json:"run_in_background"`
		BudgetTokens    int64   `json:"budget_tokens"`
		BudgetRounds    int     `json:"budget_rounds"`
		BudgetSeconds   int64   `json:"budget_seconds"`
		BudgetUSD       float64 `json:"budget_usd"`
	}
	if err := decode(tc.Input, &in); err != nil {
		st.rejectTool(a, tc, "%v", err)
		return
	}
	if in.BudgetTokens < 0 || in.BudgetRounds < 0 || in.BudgetSeconds < 0 || in.BudgetUSD < 0 {
		st.rejectTool(a, tc, "a budget's bounds are positive, or absent for none")
		return
	}
	budget := Budget{Tokens: in.BudgetTokens, Rounds: in.BudgetRounds, Wall: time.Duration(in.BudgetSeconds) * time.Second, Cost: int64(in.BudgetUSD * 1e6)}
	switch {
	case strings.TrimSpace(in.Prompt) == "":
		st.rejectTool(a, tc, "prompt is required")
		return
	case st.duplicateTask(a, TaskAgent, in.Prompt) != nil:
		t := st.duplicateTask(a, TaskAgent, in.Prompt)
		ag := st.s.Agents[t.Agent]
		st.rejectTool(a, tc, "agent %s (%s) already has this prompt as task %s; each of its runs ends in a <task-notification>. Message it with SendMessage (to: %q) or read its state with TaskOutput (task_id %q) instead of starting it again.", ag.Name, ag.ID, t.ID, ag.Name, t.ID)
		st.drop("Agent "+tc.UseID+" of "+a.Name, "duplicate-dispatch", "task "+string(t.ID)+" runs the same prompt")
		return
	case a.Depth+1 > st.cfg.MaxDepth:
		st.rejectTool(a, tc, "subagents may nest %d deep; %s is at depth %d", st.cfg.MaxDepth, a.Name, a.Depth)
		return
	case len(st.s.Agents) >= st.cfg.MaxAgents:
		st.rejectTool(a, tc, "this session has reached its limit of %d agents", st.cfg.MaxAgents)
		return
	case st.s.Session.Closed:
		st.rejectTool(a, tc, "session is closed")
		return
	}
	id := AgentID("a" + itoa(st.s.Counters.Agent+1))
	name := in.Name
	if name == "" {
		name = string(id)
	} else if name == "main" || name == "user" || st.s.Agent(name) != nil {
		st.rejectTool(a, tc, "an agent named %q exists; choose another name", name)
		return
	}
	taskID := TaskID("t" + itoa(st.s.Counters.Task+1))
	desc := in.Description
	if desc == "" {
		desc = firstLine(in.Prompt, 60)
	}
	model := in.Model
	if model == "" {
		model = st.s.Session.SubagentModel
	}
	// A child's budget never exceeds what its owner's tree has left.
	if !budget.IsZero() {
		budget = st.childBudget(a, budget)
	}
	st.emit(&AgentCreated{Agent: Agent{
		ID: id, Name: name, Description: desc, Owner: a.ID, Task: taskID, Depth: a.Depth + 1,
		Model: model, Provider: a.Provider, Driver: DriverLoop, Budget: budget,
	}})
	st.emit(&TaskStarted{Task: Task{
		ID: taskID, Kind: TaskAgent, Owner: a.ID, Agent: id, Description: desc, Prompt: in.Prompt,
		Background: in.RunInBackground, Status: TaskIdle, Incarnation: st.s.Incarnation,
	}})
	tc.Child = id
	if in.RunInBackground {
		st.startTool(a, tc)
		res := map[string]any{
			"status": "started", "agent_id": id, "name": name, "task_id": taskID,
			"detail": fmt.Sprintf("Agent %s (%s) runs in the background as task %s. Each time one of its runs ends you get a <task-notification> with its reply; message it with SendMessage to: %q.", name, id, taskID, name),
		}
		if !budget.IsZero() {
			res["budget"] = budget.describe()
		}
		st.finishTool(a, tc.UseID, jsonText(res), false)
	} else {
		tc.Wait = WaitChild
		st.startTool(a, tc)
	}
	st.enqueue(st.s.Agents[id], Item{Kind: KindSpawn, Priority: PriorityNext, From: string(a.ID), Text: in.Prompt})
}

func (st *stepper) toolSend(a *Agent, tc ToolCall) {
	var in struct {
		To       string `json:"to"`
		Message  string `json:"message"`
		Summary  string `json:"summary"`
		Priority string `json:"priority"`
	}
	if err := decode(tc.Input, &in); err != nil {
		st.rejectTool(a, tc, "%v", err)
		return
	}
	p, ok := ParsePriority(in.Priority)
	if !ok {
		st.rejectTool(a, tc, "unknown priority %q (want now, next or later)", in.Priority)
		return
	}
	if in.To == "" || in.Message == "" {
		st.rejectTool(a, tc, "to and message are required")
		return
	}
	if st.cfg.Inject == BugSenderWaits {
		// The bug: the sender's call waits for the target's model round to
		// decide the outcome.
		tc.Wait = WaitSend
		tc.Msg = st.nextMsgID()
		st.startTool(a, tc)
		m := st.send(string(a.ID), in.To, in.Message, p, tc.UseID)
		if m.Outcome != OutcomePending {
			st.finishTool(a, tc.UseID, st.renderOutcome(m), m.Outcome == OutcomeRejected)
		}
		return
	}
	// No agent waits on another agent's model (DESIGN rule 11): the result
	// is in this step; a pending outcome states its promise.
	tc.Msg = st.nextMsgID()
	st.startTool(a, tc)
	m := st.send(string(a.ID), in.To, in.Message, p, "")
	st.finishTool(a, tc.UseID, st.renderOutcome(m), m.Outcome == OutcomeRejected)
}

// send delivers a message to an agent and decides what its sender is told
// (DESIGN rule 3).
func (st *stepper) send(from, to string, text string, p Priority, senderCall string) *Msg {
	m := Msg{ID: st.nextMsgID(), From: from, To: AgentID(to), Text: text, Priority: p, SenderCall: senderCall}
	target := st.s.Agent(to)
	reject := func(reason string) *Msg {
		m.Outcome, m.Reason = OutcomeRejected, reason
		st.emit(&MessageSent{Msg: m})
		return st.s.Msgs[m.ID]
	}
	switch {
	case st.s.Session.Closed:
		return reject("the session is closed")
	case target == nil:
		return reject(fmt.Sprintf("no agent %q in this session", to))
	case target.State == AgentClosed:
		return reject(fmt.Sprintf("agent %s (%s) is closed", target.Name, target.ID))
	case string(target.ID) == from:
		return reject("an agent cannot message itself")
	case len(target.Inbox) >= st.cfg.MaxInbox:
		return reject(fmt.Sprintf("agent %s's inbox is full (%d items)", target.Name, st.cfg.MaxInbox))
	}
	if target.Driver == DriverExternal && target.Owner != "" {
		return reject(fmt.Sprintf("%s is a subagent inside a provider process; message %s instead", target.Name, st.s.Agents[MainAgent].Name))
	}
	if target.Driver == DriverCaller {
		// A message to an outside caller waits in its inbox for its next
		// wait; it is never a run of ours.
		m.To = target.ID
		m.Outcome, m.Reason = OutcomeJoined, "queued for the caller's next wait"
		st.emit(&MessageSent{Msg: m})
		st.enqueue(target, Item{Kind: KindMessage, Priority: p, From: from, Msg: m.ID, Text: text})
		return st.s.Msgs[m.ID]
	}
	if target.Blocked != nil || target.Retry != nil {
		if from == "user" {
			// A person wrote: the agent runs now.
			st.release(target, "a message from the user")
		} else if b := target.Blocked; b != nil {
			return reject(fmt.Sprintf("agent %s is blocked since its run %d failed (%s); it takes nothing until a person releases it", target.Name, b.Run, b.Reason))
		}
	}
	m.To = target.ID
	r := target.Run
	switch {
	case r == nil && target.Retry != nil:
		m.Outcome, m.Run = OutcomeResumed, len(target.Runs)+1
		m.Reason = fmt.Sprintf("%s backs off after its run %d failed; run %d starts at %s", target.Name, target.Retry.Run, m.Run, target.Retry.At.UTC().Format(time.TimeOnly))
	case r == nil:
		m.Outcome, m.Run = OutcomeResumed, len(target.Runs)+1
	case p == PriorityLater:
		m.Outcome, m.Run = OutcomeQueuedBehindStop, r.Seq
		m.Reason = fmt.Sprintf("priority later waits for the end of run %d", r.Seq)
	case target.Driver == DriverExternal:
		// A provider process takes items only between its turns.
		m.Outcome, m.Run = OutcomeQueuedBehindStop, r.Seq
		m.Reason = fmt.Sprintf("%s's provider process takes messages only between turns, and run %d is its turn in progress", target.Name, r.Seq)
	case p == PriorityNow, r.Call == nil:
		m.Outcome, m.Run = OutcomeJoined, r.Seq
	default:
		// The target's model round is in flight: its answer decides. Tool
		// calls mean another round, which the message joins; an end of turn
		// means this was the last round and run N+1 answers.
		m.Outcome, m.Run = OutcomePending, r.Seq
	}
	st.emit(&MessageSent{Msg: m})
	st.enqueue(target, Item{Kind: KindMessage, Priority: p, From: from, Msg: m.ID, Text: text})
	if m.Outcome == OutcomeResumed {
		st.tryStart(target)
	}
	return st.s.Msgs[m.ID]
}

func (st *stepper) toolTaskStop(a *Agent, tc ToolCall) {
	var in struct {
		TaskID string `json:"task_id"`
		ID     string `json:"shell_id"`
	}
	if err := decode(tc.Input, &in); err != nil {
		st.rejectTool(a, tc, "%v", err)
		return
	}
	if in.TaskID == "" {
		in.TaskID = in.ID
	}
	t := st.s.Tasks[TaskID(in.TaskID)]
	switch {
	case t == nil:
		st.rejectTool(a, tc, "no task %q", in.TaskID)
		return
	case t.Agent == a.ID:
		st.rejectTool(a, tc, "task %s is your own; end your turn instead", t.ID)
		return
	}
	st.startTool(a, tc)
	if err := st.stop(t, string(a.ID)); err != nil {
		st.finishTool(a, tc.UseID, "Error: "+err.Error(), true)
		return
	}
	st.finishTool(a, tc.UseID, fmt.Sprintf("Stopping task %s. Its notification follows.", t.ID), false)
}

// stop stops a task: kills a shell process group, or cancels an agent
// task's current run.
func (st *stepper) stop(t *Task, by string) error {
	if t.External != "" {
		return st.stopExternal(t, by)
	}
	switch t.Kind {
	case TaskShell:
		if !t.Status.Live() {
			return errorf(CodeConflict, "task %s already ended (%s)", t.ID, t.Status)
		}
		if t.Status != TaskStopping {
			st.emit(&TaskUpdated{Task: t.ID, Status: TaskStopping})
			st.effect(StopShell{Task: t.ID})
		}
		return nil
	default:
		ag := st.s.Agents[t.Agent]
		if ag == nil || ag.Run == nil {
			return errorf(CodeConflict, "task %s is not running (%s)", t.ID, t.Status)
		}
		st.endRun(ag, RunCancelled, "", "stopped by "+by)
		return nil
	}
}

func (st *stepper) toolTaskOutput(a *Agent, tc ToolCall) {
	var in struct {
		TaskID  string `json:"task_id"`
		Block   bool   `json:"block"`
		Timeout int64  `json:"timeout"`
		Offset  int64  `json:"offset"`
		Limit   int64  `json:"limit"`
	}
	if err := decode(tc.Input, &in); err != nil {
		st.rejectTool(a, tc, "%v", err)
		return
	}
	t := st.s.Tasks[TaskID(in.TaskID)]
	if t == nil {
		st.rejectTool(a, tc, "no task %q", in.TaskID)
		return
	}
	if in.Block && st.taskBusy(t) {
		timeout := time.Duration(in.Timeout) * time.Millisecond
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		tc.Wait = WaitTask
		tc.WaitFor = t.ID
		tc.Deadline = st.now.Add(min(timeout, 10*time.Minute))
		st.startTool(a, tc)
		return
	}
	st.startTool(a, tc)
	st.answerTaskOutput(a, a.Run.tool(tc.UseID), t)
}

func (st *stepper) taskBusy(t *Task) bool {
	if t.Kind == TaskShell {
		return t.Status.Live()
	}
	ag := st.s.Agents[t.Agent]
	return ag != nil && ag.Run != nil
}

// answerTaskOutput answers a TaskOutput call: an agent task's state and last
// reply at once; a shell task's output through the runtime, which reads the
// output file.
func (st *stepper) answerTaskOutput(a *Agent, tc *ToolCall, t *Task) {
	if t.Kind == TaskShell {
		var in map[string]any
		_ = json.Unmarshal(tc.Input, &in)
		if in == nil {
			in = map[string]any{}
		}
		in["output_path"] = t.OutputPath
		in["status"] = t.Status
		if t.ExitCode != nil {
			in["exit_code"] = *t.ExitCode
		}
		b, _ := json.Marshal(in)
		st.emit(&ToolCallWaiting{Agent: a.ID, UseID: tc.UseID, Wait: WaitEffect})
		st.effect(ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: "TaskOutput", Input: b})
		return
	}
	ag := st.s.Agents[t.Agent]
	res := map[string]any{"task_id": t.ID, "agent_id": ag.ID, "name": ag.Name, "status": t.Status, "runs": len(ag.Runs)}
	if n := len(ag.Runs); n > 0 {
		last := ag.Runs[n-1]
		res["last_run"] = map[string]any{"seq": last.Seq, "status": last.Status, "reply": last.Reply, "error": last.Error}
	}
	if ag.Run != nil {
		res["running"] = map[string]any{"seq": ag.Run.Seq, "round": ag.Run.Round}
	}
	st.finishTool(a, tc.UseID, jsonText(res), false)
}

// resolveTaskWaiters answers the blocking TaskOutput calls that wait on t.
func (st *stepper) resolveTaskWaiters(t TaskID) {
	if t == "" {
		return
	}
	task := st.s.Tasks[t]
	for _, id := range st.s.Order {
		a := st.s.Agents[id]
		if a.Run == nil || st.ending[a.ID] {
			continue
		}
		for _, tc := range a.Run.Tools {
			if !tc.Done && tc.Wait == WaitTask && tc.WaitFor == t {
				st.answerTaskOutput(a, tc, task)
				st.maybeNextRound(a)
			}
		}
	}
}

func (st *stepper) toolWakeup(a *Agent, tc ToolCall) {
	var in struct {
		Prompt       string `json:"prompt"`
		DelaySeconds *int64 `json:"delay_seconds"`
		At           string `json:"at"`
	}
	if err := decode(tc.Input, &in); err != nil {
		st.rejectTool(a, tc, "%v", err)
		return
	}
	var at time.Time
	switch {
	case in.Prompt == "":
		st.rejectTool(a, tc, "prompt is required")
		return
	case in.DelaySeconds != nil && in.At != "", in.DelaySeconds == nil && in.At == "":
		st.rejectTool(a, tc, "give exactly one of delay_seconds and at")
		return
	case in.DelaySeconds != nil:
		if *in.DelaySeconds < 0 || *in.DelaySeconds > 7*24*3600 {
			st.rejectTool(a, tc, "delay_seconds must be between 0 and one week")
			return
		}
		at = st.now.Add(time.Duration(*in.DelaySeconds) * time.Second)
	default:
		t, err := time.Parse(time.RFC3339, in.At)
		if err != nil {
			st.rejectTool(a, tc, "at: %v", err)
			return
		}
		at = t
	}
	id := TimerID("w" + itoa(st.s.Counters.Timer+1))
	st.startTool(a, tc)
	st.emit(&TimerSet{Timer: Timer{ID: id, Agent: a.ID, At: at, Prompt: in.Prompt}})
	st.finishTool(a, tc.UseID, jsonText(map[string]any{"status": "scheduled", "timer_id": id, "at": at.UTC().Format(time.RFC3339Nano)}), false)
}

// toolGuarded handles the tools that act outside vigil (Bash, file tools,
// unknown ones): the session's permissions decide; an ask waits for a
// person.
func (st *stepper) toolGuarded(a *Agent, tc ToolCall) {
	p := st.s.Session.Permissions
	dec, reason := permission.DecideIn(st.s.Session.Roots(), string(p.Mode), p.Allow, p.Deny, tc.Name, tc.Input)
	switch dec {
	case permission.Deny:
		st.rejectTool(a, tc, "permission denied: %s", reason)
	case permission.Ask:
		id := ApprovalID("p" + itoa(st.s.Counters.Approval+1))
		tc.Wait = WaitApproval
		tc.Approval = id
		st.startTool(a, tc)
		st.emit(&ApprovalRequested{Approval: Approval{
			ID: id, Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Tool: tc.Name, Input: tc.Input,
			Reason: reason, Deadline: st.now.Add(st.cfg.ApprovalTTL),
		}})
	default:
		st.startTool(a, tc)
		st.runTool(a, a.Run.tool(tc.UseID))
	}
}

// runTool runs a permitted tool call: a background Bash becomes a shell
// task; everything else is executed by the runtime.
func (st *stepper) runTool(a *Agent, tc *ToolCall) {
	if tc.Name == "Bash" {
		var in struct {
			Command         string `json:"command"`
			Timeout         int64  `json:"timeout"`
			Description     string `json:"description"`
			RunInBackground bool   `json:"run_in_background"`
		}
		if err := json.Unmarshal(tc.Input, &in); err != nil || strings.TrimSpace(in.Command) == "" {
			msg := "command is required"
			if err != nil {
				msg = "invalid input: " + err.Error()
			}
			st.finishTool(a, tc.UseID, "Error: "+msg, true)
			return
		}
		if in.RunInBackground {
			if t := st.duplicateTask(a, TaskShell, in.Command); t != nil {
				st.finishTool(a, tc.UseID, fmt.Sprintf("Error: this command already runs in the background as task %s (started %s); its <task-notification> will come. Read its output so far with TaskOutput (task_id %q) instead of starting it again.", t.ID, t.Started.UTC().Format(time.TimeOnly), t.ID), true)
				st.drop("Bash "+tc.UseID+" of "+a.Name, "duplicate-dispatch", "task "+string(t.ID)+" runs the same command")
				return
			}
			st.startShell(a, tc, in.Command, in.Description, time.Duration(in.Timeout)*time.Millisecond)
			return
		}
	}
	st.emit(&ToolCallWaiting{Agent: a.ID, UseID: tc.UseID, Wait: WaitEffect})
	st.effect(ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: tc.Name, Input: tc.Input})
}

func (st *stepper) startShell(a *Agent, tc *ToolCall, command, desc string, timeout time.Duration) {
	id := TaskID("t" + itoa(st.s.Counters.Task+1))
	if desc == "" {
		desc = firstLine(command, 60)
	}
	if timeout <= 0 {
		timeout = st.cfg.BackgroundTimeout
	}
	out := "tasks/" + string(id) + ".output"
	st.emit(&TaskStarted{Task: Task{
		ID: id, Kind: TaskShell, Owner: a.ID, Description: desc, Command: command, Background: true,
		Status: TaskRunning, OutputPath: out, Timeout: timeout, Incarnation: st.s.Incarnation,
	}})
	st.effect(StartShell{Task: id, Command: command, Cwd: st.s.Session.Cwd, Timeout: timeout, OutputPath: out})
	st.finishTool(a, tc.UseID, jsonText(map[string]any{
		"status": "started", "task_id": id, "output": fmt.Sprintf("TaskOutput {\"task_id\": %q}", id),
		"detail": fmt.Sprintf("Command running in background as task %s. You will get a <task-notification> when it exits; read its output with TaskOutput (task_id %q).", id, id),
	}), false)
}

func (st *stepper) answerApproval(in AnswerApproval) {
	p := st.s.Approvals[in.Approval]
	if p == nil {
		st.fail(CodeNotFound, "no pending permission request %q", in.Approval)
		return
	}
	if !in.Always || !in.Allow {
		st.resolveApproval(p, in.Allow, in.By, in.Reason)
		return
	}
	rule, err := permission.RuleFor(p.Tool, p.Input)
	if err != nil {
		st.fail(CodeInvalid, "cannot allow %s always: %v; allow it once", p.Tool, err)
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	st.emit(&PermissionRuleAdded{Rule: rule, By: by, Approval: p.ID})
	st.resolveApproval(p, true, in.By, in.Reason)
	// The rule answers every other request it allows, at once.
	perms := st.s.Session.Permissions
	for _, id := range sortedApprovals(st.s) {
		q := st.s.Approvals[id]
		if dec, _ := permission.DecideIn(st.s.Session.Roots(), string(perms.Mode), perms.Allow, perms.Deny, q.Tool, q.Input); dec == permission.Allow {
			st.resolveApproval(q, true, by, "allowed by the rule "+rule)
		}
	}
}

// PermissionRuleAdded adds an allow rule to the session's permissions: a
// person answered a request "allow always".
type PermissionRuleAdded struct {
	Rule     string     `json:"rule"`
	By       string     `json:"by,omitempty"`
	Approval ApprovalID `json:"approval,omitempty"`
}

// Type implements Body: the name of the event.
func (*PermissionRuleAdded) Type() string { return "permission.rule_added" }
func (e *PermissionRuleAdded) apply(s *State, _ time.Time) {
	if !slices.Contains(s.Session.Permissions.Allow, e.Rule) {
		s.Session.Permissions.Allow = append(slices.Clone(s.Session.Permissions.Allow), e.Rule)
	}
}

func (st *stepper) resolveApproval(p *Approval, allow bool, by, reason string) {
	a := st.s.Agents[p.Agent]
	st.emit(&ApprovalResolved{Approval: p.ID, Allow: allow, By: by, Reason: reason})
	if p.External != "" {
		msg := reason
		if !allow {
			msg = "permission denied"
			if by != "" {
				msg += " by " + by
			}
			if reason != "" {
				msg += ": " + reason
			}
		}
		st.effect(AnswerPermission{Agent: a.ID, Request: p.External, Allow: allow, Reason: msg})
		return
	}
	tc := a.Run.tool(p.UseID)
	if tc == nil || tc.Done {
		return
	}
	if allow {
		st.runTool(a, tc)
	} else {
		msg := "permission denied"
		if by != "" {
			msg += " by " + by
		}
		if reason != "" {
			msg += ": " + reason
		}
		st.finishTool(a, tc.UseID, "Error: "+msg, true)
	}
	st.maybeNextRound(a)
}

func (st *stepper) cancelRun(in CancelRun) {
	a := st.s.Agent(in.Agent)
	switch {
	case a == nil:
		st.fail(CodeNotFound, "no agent %q", in.Agent)
	case a.Run == nil:
		st.fail(CodeConflict, "agent %s has no run in progress", a.Name)
	default:
		why := "cancelled"
		if in.By != "" {
			why += " by " + in.By
		}
		if in.Reason != "" {
			why += ": " + in.Reason
		}
		switch {
		case st.external(a) && a.Owner == "":
			st.cancelExternal(a, why)
			return
		case st.external(a):
			// A subagent inside a provider process: the process stops it
			// and reports its end.
			if err := st.stopExternal(st.s.Tasks[a.Task], in.By); err != nil {
				st.out.Err = err
			}
			return
		}
		st.endRun(a, RunCancelled, "", why)
	}
}

func (st *stepper) stopTask(in StopTask) {
	t := st.s.Tasks[in.Task]
	if t == nil {
		st.fail(CodeNotFound, "no task %q", in.Task)
		return
	}
	by := in.By
	if by == "" {
		by = "user"
	}
	// Validate before emitting: a refused input must leave no events.
	if t.Kind == TaskShell && !t.Status.Live() {
		st.fail(CodeConflict, "task %s already ended (%s)", t.ID, t.Status)
		return
	}
	// A provider's subagent between runs can be stopped too: it may be
	// waiting on background work of its own, which the stop ends.
	idleMirror := t.External != "" && t.Status == TaskIdle
	if !st.taskBusy(t) && t.Kind == TaskAgent && !idleMirror {
		st.fail(CodeConflict, "task %s is not running (%s)", t.ID, t.Status)
		return
	}
	_ = st.stop(t, by)
}

func (st *stepper) findItem(id ItemID) (*Agent, *Item, int) {
	for _, aid := range st.s.Order {
		a := st.s.Agents[aid]
		for i, it := range a.Inbox {
			if it.ID == id {
				return a, it, i
			}
		}
	}
	return nil, nil, -1
}

func (st *stepper) cancelItem(in CancelItem) {
	a, it, _ := st.findItem(in.Item)
	switch {
	case it == nil:
		st.fail(CodeNotFound, "no queued item %q", in.Item)
		return
	case it.Kind != KindPrompt && it.Kind != KindContinuation:
		st.fail(CodeConflict, "item %s is a %s; only queued prompts and continuations can be cancelled (messages and notifications are always delivered)", it.ID, it.Kind)
		return
	}
	st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "cancelled", By: in.By})
	if it.Gate != 0 && a.Gate != nil && a.Gate.Gen == it.Gate {
		st.emit(&GateReleased{Agent: a.ID, Gen: it.Gate, Outcome: GateCancelled})
	}
}

func (st *stepper) moveItem(in MoveItem) {
	a, it, _ := st.findItem(in.Item)
	if it == nil {
		st.fail(CodeNotFound, "no queued item %q", in.Item)
		return
	}
	if in.Index < 0 || in.Index >= len(a.Inbox) {
		st.fail(CodeInvalid, "index %d out of range (inbox holds %d items)", in.Index, len(a.Inbox))
		return
	}
	st.emit(&ItemMoved{Agent: a.ID, Item: it.ID, Index: in.Index})
}

// closeAgent closes an agent and, first, every agent it owns. Whatever was
// queued for it is dropped, loudly.
func (st *stepper) closeAgent(a *Agent, reason string) {
	if a.State == AgentClosed {
		return
	}
	for _, id := range st.s.Order {
		if b := st.s.Agents[id]; b.Owner == a.ID && b.State != AgentClosed {
			st.closeAgent(b, "its owner "+a.Name+" closed")
		}
	}
	if a.Driver == DriverExternal && a.Owner != "" && a.Run != nil {
		// A subagent inside a provider process: the process stops it too.
		if t := st.s.Tasks[a.Task]; t != nil {
			_ = st.stopExternal(t, "close of "+a.Name)
		}
	}
	if a.Run != nil {
		// Messages whose outcome waited on this run will not be answered.
		for _, id := range a.Run.PendingSends {
			st.resolveMsgAs(st.s.Msgs[id], OutcomeRejected, a.Run.Seq, "agent "+a.Name+" was closed before its model round answered")
		}
		st.endRun(a, RunCancelled, "", "agent closed: "+reason)
	}
	for _, id := range st.s.TaskOrder {
		if t := st.s.Tasks[id]; t.Owner == a.ID && t.Kind == TaskShell && t.Status.Live() && t.External == "" {
			_ = st.stop(t, "close of "+a.Name)
		}
	}
	if a.Driver == DriverExternal && a.Owner == "" {
		// Its provider process ends; its exit ends the mirrored tasks.
		st.effect(StopProvider{Agent: a.ID})
	}
	for _, it := range a.Carried {
		if it.Note != nil {
			st.emit(&NotificationDropped{Key: *it.Note, Reason: "owner closed before its model saw it"})
		}
		if m := st.s.Msgs[it.Msg]; m != nil && m.Outcome != OutcomeRejected {
			st.emit(&MessageResolved{Msg: m.ID, Outcome: OutcomeRejected, Run: len(a.Runs), Reason: "agent " + a.Name + " was closed before a model saw the message"})
		}
		st.drop(string(it.Kind)+" "+string(it.ID)+" to "+a.Name, "agent-closed", reason+"; a cancelled run had taken it and no model saw it")
	}
	for _, it := range append([]*Item(nil), a.Inbox...) {
		st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "agent closed"})
		if it.Note != nil {
			st.emit(&NotificationDropped{Key: *it.Note, Reason: "owner closed"})
		}
		st.drop(string(it.Kind)+" "+string(it.ID)+" to "+a.Name, "agent-closed", reason)
	}
	// Notifications a provider process was still to deliver to it.
	for _, k := range st.s.NoteOrder {
		if n := st.s.Note(k); n.Owner == a.ID && n.Delivery == DeliverProvider && n.DeliveredRun == 0 && n.Dropped == "" {
			st.emit(&NotificationDropped{Key: k, Reason: "owner closed"})
			st.drop("notification "+k.String(), "owner-closed", reason)
		}
	}
	if g := a.Gate; g != nil {
		st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateDropped})
	}
	for _, id := range sortedTimers(st.s) {
		if t := st.s.Timers[id]; t.Agent == a.ID {
			st.emit(&TimerCancelled{Timer: id, Reason: "agent closed"})
		}
	}
	st.emit(&AgentRetired{Agent: a.ID, Reason: reason})
}

func (st *stepper) closeSession(reason string) {
	st.closeAgent(st.s.Agents[MainAgent], reason)
	for _, id := range st.s.Order {
		if a := st.s.Agents[id]; a.State != AgentClosed {
			st.closeAgent(a, reason)
		}
	}
	st.emit(&SessionClosed{Reason: reason})
}

// providerWake turns a provider's request for a turn into a continuation
// behind the agent's gate (DESIGN rules 5 and 6): never held, coalesced
// with a pending one by superseding it, released on every outcome.
func (st *stepper) providerWake(in ProviderWake) {
	a := st.s.Agents[in.Agent]
	if a == nil || a.State == AgentClosed || st.s.Session.Closed {
		st.drop("provider wake for "+string(in.Agent), "agent-closed", in.Evidence)
		return
	}
	if a.Driver == DriverExternal && a.Owner != "" {
		st.drop("provider wake for "+string(in.Agent), "mirrored-subagent", "a subagent inside a provider process is woken by its process, not by vigil")
		return
	}
	if st.cfg.Inject == BugHeldContinuation {
		if a.Gate != nil {
			return // the 002 bug: swallowed while the sticky gate is set
		}
		gen := st.s.Counters.Gate + 1
		id := st.nextItemID()
		st.emit(&GateOpened{Agent: a.ID, Gate: Gate{Gen: gen, Item: id}})
		st.enqueue(a, Item{ID: id, Kind: KindPrompt, Priority: PriorityLater, From: "system", Text: in.Evidence, Gate: gen})
		return
	}
	evidence := in.Evidence
	if g := a.Gate; g != nil {
		st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateSuperseded})
		for _, it := range a.Inbox {
			if it.ID == g.Item {
				evidence = it.Text + "\n" + evidence
				st.emit(&ItemRemoved{Agent: a.ID, Item: it.ID, Reason: "superseded by a newer wake that carries its evidence"})
				break
			}
		}
	}
	gen := st.s.Counters.Gate + 1
	id := st.nextItemID()
	st.emit(&GateOpened{Agent: a.ID, Gate: Gate{Gen: gen, Item: id, Deadline: st.now.Add(st.cfg.GateTTL)}})
	st.enqueue(a, Item{ID: id, Kind: KindContinuation, Priority: PriorityNext, From: "provider", Text: evidence, Gate: gen})
}

// tick handles every deadline that is due.
func (st *stepper) tick() {
	for _, aid := range st.s.Order {
		if a := st.s.Agents[aid]; a.Retry != nil && !a.Retry.At.After(st.now) {
			st.emit(&RetryDue{Agent: a.ID})
		}
	}
	for _, id := range sortedTimers(st.s) {
		t := st.s.Timers[id]
		if t.At.After(st.now) {
			continue
		}
		st.emit(&TimerFired{Timer: id})
		a := st.s.Agents[t.Agent]
		if a == nil || a.State == AgentClosed {
			st.drop("timer "+string(id), "agent-closed", "its agent is closed")
			continue
		}
		st.enqueue(a, Item{Kind: KindTimer, Priority: PriorityNext, From: "timer", Timer: id, Text: t.Prompt})
	}
	for _, aid := range st.s.Order {
		a := st.s.Agents[aid]
		if g := a.Gate; g != nil && !g.Deadline.IsZero() && !g.Deadline.After(st.now) {
			st.emit(&GateReleased{Agent: a.ID, Gen: g.Gen, Outcome: GateDeadline})
		}
		if a.Run == nil {
			continue
		}
		if d := a.Run.Cancelling; !d.IsZero() && !d.After(st.now) {
			if st.external(a) && a.Owner == "" {
				// A process that does not end its turn when asked is hung:
				// it is ended, and the next delivery starts a new one.
				st.effect(StopProvider{Agent: a.ID})
			}
			if a.Run.Silent {
				// Not a person's cancel: a failure, retried and bounded.
				st.endRunFailed(a, RunInterrupted, "", "the provider process went silent and did not end its turn when asked", FailTransient)
				continue
			}
			st.endRun(a, RunCancelled, "", "cancelled; the provider process did not end its turn when asked")
			continue
		}
		if d := a.Run.Expect; !d.IsZero() && !d.After(st.now) && a.Run.Cancelling.IsZero() {
			if st.awaitsPerson(a) {
				// The process waits for a person's answer, which has a
				// deadline of its own: not silence.
				st.heard(a)
				continue
			}
			st.providerSilent(a)
			continue
		}
		for _, tc := range a.Run.Tools {
			if tc.Done || tc.Deadline.IsZero() || tc.Deadline.After(st.now) {
				continue
			}
			switch tc.Wait {
			case WaitTask:
				st.answerTaskOutput(a, tc, st.s.Tasks[tc.WaitFor])
				st.maybeNextRound(a)
			}
		}
	}
	for _, id := range sortedApprovals(st.s) {
		p := st.s.Approvals[id]
		if !p.Deadline.After(st.now) {
			st.resolveApproval(p, false, "", "no answer before its deadline")
		}
	}
	st.notesOverdue()
}

// recover takes a session over after a restart (DESIGN rule 7): shell
// processes died with the previous process, so their tasks end interrupted
// and notify; model calls in flight are issued again under the same ids;
// tool executions are re-issued where that is safe and reported
// interrupted where it is not.
func (st *stepper) recover(in Recover) {
	st.emit(&Recovered{Incarnation: in.Incarnation})
	for _, id := range st.s.TaskOrder {
		t := st.s.Tasks[id]
		if t.Kind != TaskShell || !t.Status.Live() || t.External != "" {
			continue // a provider's mirrored commands end with its process, below
		}
		status := TaskInterrupted
		if t.Status == TaskStopping {
			status = TaskStopped
		}
		st.endShell(t, status, nil, "", "the process ended with the previous vigil process")
	}
	for _, id := range st.s.Order {
		if a := st.s.Agents[id]; a.Driver == DriverExternal && a.Owner == "" {
			st.providerExited(a, "vigil restarted; the process ended with the previous vigil process")
		}
	}
	for _, id := range st.s.Order {
		a := st.s.Agents[id]
		if a.Run == nil || a.Driver == DriverExternal {
			continue
		}
		if c := a.Run.Call; c != nil && c.State != CallWaitingSlot {
			if c.State == CallBackoff {
				st.emit(&ModelCallDispatched{Agent: a.ID, Call: c.ID})
			}
			st.effect(st.callModel(a))
		}
		for _, tc := range a.Run.Tools {
			if tc.Done || tc.Wait != WaitEffect {
				continue
			}
			if reissuable[tc.Name] {
				st.effect(ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: tc.Name, Input: tc.Input})
				continue
			}
			st.finishTool(a, tc.UseID, "Error: interrupted: vigil restarted while this tool ran; it may have partly completed. Check its effects before running it again.", true)
		}
		st.maybeNextRound(a)
	}
}

// InFlight returns the effects a state has in flight: model calls and tool
// executions it waits for. A runtime that reloaded a session's state after
// a commit whose outcome it could not know starts them again (their ids
// make that safe); processes it still runs are not among them.
func InFlight(s *State) []Effect {
	var out []Effect
	st := &stepper{s: s}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Run == nil || a.Driver != DriverLoop {
			continue
		}
		if c := a.Run.Call; c != nil && c.State != CallWaitingSlot {
			out = append(out, st.callModel(a))
		}
		for _, tc := range a.Run.Tools {
			if !tc.Done && tc.Wait == WaitEffect {
				out = append(out, ExecTool{Agent: a.ID, Run: a.Run.Seq, UseID: tc.UseID, Name: tc.Name, Input: tc.Input})
			}
		}
	}
	return out
}

// reissuable are tools that are safe to execute again after a crash.
var reissuable = map[string]bool{"Read": true, "Glob": true, "Grep": true, "TaskOutput": true, "ListAgents": true, "Write": true}

// NextDeadline returns the earliest time at which a Tick has work to do, or
// the zero time when there is none.
func NextDeadline(s *State) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, t := range s.Timers {
		consider(t.At)
	}
	for _, p := range s.Approvals {
		consider(p.Deadline)
	}
	if hasProvider(s) {
		for _, k := range s.NoteOrder {
			if n := s.Note(k); undeliveredNote(n) {
				consider(n.DeliverBy)
			}
		}
	}
	for _, id := range s.Order {
		a := s.Agents[id]
		if a.Gate != nil {
			consider(a.Gate.Deadline)
		}
		if a.Retry != nil {
			consider(a.Retry.At)
		}
		if a.Run != nil {
			consider(a.Run.Cancelling)
			if a.Run.Cancelling.IsZero() {
				consider(a.Run.Expect)
			}
			for _, tc := range a.Run.Tools {
				if !tc.Done {
					consider(tc.Deadline)
				}
			}
		}
	}
	return next
}
