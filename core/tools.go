package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/internal/permission"
	"github.com/vigilrun/vigil/internal/text"
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
	id := AgentID("a" + strconv.Itoa(st.s.Counters.Agent+1))
	name := in.Name
	if name == "" {
		name = string(id)
	} else if name == "main" || name == "user" || st.s.Agent(name) != nil {
		st.rejectTool(a, tc, "an agent named %q exists; choose another name", name)
		return
	}
	taskID := TaskID("t" + strconv.Itoa(st.s.Counters.Task+1))
	desc := in.Description
	if desc == "" {
		desc = text.FirstLine(in.Prompt, 60)
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
	if st.seedSend(a, tc, in.To, in.Message, p) {
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
	if target.Blocked != nil || target.Retry != nil {
		if from == "user" {
			// A person wrote: the agent runs now.
			st.release(target, "a message from the user")
		} else if b := target.Blocked; b != nil {
			return reject(fmt.Sprintf("agent %s is blocked since its run %d failed (%s); it takes nothing until a person releases it", target.Name, b.Run, b.Reason))
		}
	}
	// The target's driver decides what the sender is told.
	st.driver(target).tell(st, target, &m, p)
	if m.Outcome == OutcomeRejected {
		return reject(m.Reason)
	}
	m.To = target.ID
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
		// The model's offset and limit, if any, and what the runtime needs
		// to read the file.
		var in TaskOutputRequest
		_ = json.Unmarshal(tc.Input, &in)
		in.TaskID, in.OutputPath, in.Status, in.ExitCode = t.ID, t.OutputPath, t.Status, t.ExitCode
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
		if a.Run == nil || st.isEnding(a.ID) {
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
	id := TimerID("w" + strconv.Itoa(st.s.Counters.Timer+1))
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
		id := ApprovalID("p" + strconv.Itoa(st.s.Counters.Approval+1))
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
	id := TaskID("t" + strconv.Itoa(st.s.Counters.Task+1))
	if desc == "" {
		desc = text.FirstLine(command, 60)
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

func (st *stepper) shellStartFailed(in ShellStartFailed) {
	t := st.s.Tasks[in.Task]
	if t == nil || t.Kind != TaskShell || !t.Status.Live() {
		st.drop("shell start failure "+string(in.Task), "stale-process-event", in.Error)
		return
	}
	st.endShell(t, TaskFailed, nil, "", in.Error)
}

func (st *stepper) processExited(in ProcessExited) {
	t := st.s.Tasks[in.Task]
	if t == nil || t.Kind != TaskShell || !t.Status.Live() {
		st.drop("process exit "+string(in.Task), "stale-process-event", "the task already ended")
		return
	}
	status := TaskCompleted
	switch {
	case in.Stopped || t.Status == TaskStopping:
		status = TaskStopped
	case in.TimedOut:
		status = TaskTimedOut
	case in.ExitCode != 0:
		status = TaskFailed
	}
	code := in.ExitCode
	st.endShell(t, status, &code, in.Tail, in.Signal)
}

// endShell ends a shell task and notifies its owner under (task, exit).
func (st *stepper) endShell(t *Task, status TaskStatus, code *int, tail, detail string) {
	st.emit(&TaskUpdated{Task: t.ID, Status: status, ExitCode: code, OutputTail: tail, Ended: true})
	key := NoteKey{Task: t.ID}
	if st.s.Note(key) != nil {
		st.drop("notification "+key.String(), "duplicate-notification", "a notification with this key exists; the write is a no-op")
		return
	}
	n := Note{
		Key: key, Owner: t.Owner, Kind: TaskShell, Status: string(status), ExitCode: code,
		Output: tail, OutputPath: t.OutputPath, Error: detail, Duration: st.now.Sub(t.Started),
		Delivery: DeliverInbox,
	}
	st.deliverNote(n)
	st.resolveTaskWaiters(t.ID)
}
