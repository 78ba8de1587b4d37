package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// generateWorkload schedules what the outside world does: the session and
// its first prompt, then user actions at random times.
func (w *world) generateWorkload() {
	perm := core.PermBypass
	if w.rng.IntN(4) == 0 {
		perm = core.PermAsk
	}
	driver := map[mode]core.Driver{modeLoop: core.DriverLoop, modeExternal: core.DriverExternal, modeCaller: core.DriverCaller}[w.mode]
	w.schedule(w.now, 0, "create session", func() core.Input {
		in := core.CreateSession{
			Session: core.Session{ID: core.SessionID(fmt.Sprintf("sim%d", w.opts.Seed)), Permissions: core.Permissions{Mode: perm}, Budget: w.sessionBudget},
			Driver:  driver,
		}
		if w.mode != modeCaller {
			in.Prompt = w.token("prompt")
		}
		return in
	})
	if perm == core.PermAsk && w.limits.IntN(3) == 0 {
		// A person changes the permission mode part way, which answers
		// what the new mode decides.
		to := []core.PermissionMode{core.PermBypass, core.PermAuto, core.PermAcceptEdits}[w.limits.IntN(3)]
		w.schedule(w.now.Add(time.Duration(1+w.limits.IntN(30))*time.Second), 0, "set permission mode", func() core.Input {
			return core.SetPermissionMode{Mode: to, By: "sim"}
		})
	}
	if w.mode == modeCaller {
		for i := range 1 + w.rng.IntN(3) {
			at := w.now.Add(time.Duration(i) * time.Millisecond)
			w.schedule(at, 0, "spawn agent", func() core.Input {
				w.names++
				return core.SpawnAgent{Name: fmt.Sprintf("w%d", w.names), Prompt: w.token("task")}
			})
		}
	}
	if !w.sessionBudget.IsZero() && w.limits.IntN(2) == 0 {
		// A person raises the budget later, which releases what it blocked.
		at := w.now.Add(time.Duration(5+w.limits.IntN(40)) * time.Second)
		w.schedule(at, 0, "raise budget", func() core.Input {
			b := w.state.Session.Budget
			b.Rounds, b.Tokens = b.Rounds*2, b.Tokens*2
			return core.SetBudget{Budget: b, By: "sim"}
		})
	}
	horizon := time.Duration(5+w.rng.IntN(60)) * time.Second
	n := 3 + w.rng.IntN(20*w.scale)
	for range n {
		at := w.now.Add(time.Duration(w.rng.Int64N(int64(horizon))))
		switch k := w.rng.IntN(100); {
		case k < 20:
			prio := w.priority()
			bound := 0
			if w.limits.IntN(4) == 0 {
				bound = 1 + w.limits.IntN(3) // the prompt bounds its run's rounds
			}
			w.schedule(at, 0, "user prompt", func() core.Input {
				return core.UserPrompt{Text: w.token("prompt"), Priority: prio, MaxRounds: bound}
			})
		case k < 40:
			prio := w.priority()
			w.schedule(at, 0, "user message", func() core.Input {
				return core.UserMessage{To: pick(w, w.agentNames(true)), Text: w.token("user-msg"), Priority: prio}
			})
		case k < 52:
			// A hold, always released later.
			release := at.Add(time.Duration(w.rng.Int64N(int64(10 * time.Second))))
			w.schedule(at, 0, "hold", func() core.Input { return core.HoldQueue{By: "sim"} })
			w.schedule(release, 0, "resume", func() core.Input { return core.ResumeQueue{By: "sim"} })
		case k < 62:
			w.schedule(at, 0, "provider wake", func() core.Input {
				var ids []core.AgentID
				for _, id := range w.state.Order {
					if a := w.state.Agents[id]; a.Driver != core.DriverExternal || a.Owner == "" {
						ids = append(ids, id) // mirrored subagents are woken by their process
					}
				}
				return core.ProviderWake{Agent: pick(w, ids), Evidence: w.wakeToken()}
			})
		case k < 70:
			w.schedule(at, 0, "cancel run", func() core.Input {
				var running []string
				for _, id := range w.state.Order {
					if w.state.Agents[id].Run != nil {
						running = append(running, string(id))
					}
				}
				if len(running) == 0 {
					return nil
				}
				return core.CancelRun{Agent: pick(w, running), By: "sim"}
			})
		case k < 78:
			w.schedule(at, 0, "stop task", func() core.Input {
				ids := w.taskIDs()
				if len(ids) == 0 {
					return nil
				}
				return core.StopTask{Task: pick(w, ids), By: "sim"}
			})
		case k < 86:
			w.schedule(at, 0, "cancel prompt", func() core.Input {
				var ids []core.ItemID
				for _, it := range w.state.Agents[core.MainAgent].Inbox {
					if it.Kind == core.KindPrompt || it.Kind == core.KindContinuation {
						ids = append(ids, it.ID)
					}
				}
				if len(ids) == 0 {
					return nil
				}
				return core.CancelItem{Item: pick(w, ids), By: "sim"}
			})
		case k < 89:
			w.schedule(at, 0, "close agent", func() core.Input {
				if len(w.state.Order) < 2 {
					return nil
				}
				return core.CloseAgent{Agent: string(pick(w, w.state.Order[1:])), By: "sim"}
			})
		case k < 90:
			// Now and then the whole session is closed mid-flight.
			w.schedule(at, 0, "close session", func() core.Input {
				if w.rng.IntN(2) == 0 {
					return core.CloseAgent{Agent: "main", By: "sim"}
				}
				return core.CloseSession{By: "sim", Reason: "closed by the simulated user"}
			})
		default:
			w.schedule(at, 0, "move prompt", func() core.Input {
				in := w.state.Agents[core.MainAgent].Inbox
				if len(in) < 2 {
					return nil
				}
				return core.MoveItem{Item: in[len(in)-1].ID, Index: 0}
			})
		}
	}
}

func (w *world) wakeToken() string {
	t := w.token("wake")
	w.chk.wakes = append(w.chk.wakes, t)
	return t
}

// answer is the simulated model: it looks at the state when the call
// answers and picks an end of turn or a few tool calls.
func (w *world) answer(ef core.CallModel, final bool) core.Input {
	a := w.state.Agents[ef.Agent]
	if ef.Purpose == core.PurposeCompact && !w.outage.covers(w.now) {
		text := fmt.Sprintf("summary of %d messages of %s", len(ef.Messages), ef.AgentName)
		return core.ModelResponded{Agent: ef.Agent, Call: ef.Call, Response: chat.Response{
			Content: []chat.Block{chat.Text(text)}, StopReason: chat.StopEndTurn, Usage: usageOf(ef, text),
		}}
	}
	if w.outage.covers(w.now) {
		return core.ModelFailed{Agent: ef.Agent, Call: ef.Call, Kind: w.outage.kind, Error: "simulated outage: " + string(w.outage.kind)}
	}
	if w.rng.IntN(40) == 0 {
		return core.ModelFailed{Agent: ef.Agent, Call: ef.Call, Kind: core.FailTransient, Error: "simulated provider error after retries"}
	}
	w.budget.rounds--
	text := fmt.Sprintf("reply of %s to call %s", ef.AgentName, ef.Call)
	if final || w.budget.rounds <= 0 || a == nil || a.Run == nil || a.Run.Round > 4 {
		return core.ModelResponded{Agent: ef.Agent, Call: ef.Call, Response: chat.Response{
			Content: []chat.Block{chat.Text(text)}, StopReason: chat.StopEndTurn, Usage: usageOf(ef, text),
		}}
	}
	blocks := []chat.Block{chat.Text(text)}
	n := 1 + w.rng.IntN(3)
	for i := range n {
		if b, ok := w.toolCall(ef, a, i); ok {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 1 {
		blocks = append(blocks, toolUse(ef, 0, "ListAgents", map[string]any{}))
	}
	return core.ModelResponded{Agent: ef.Agent, Call: ef.Call, Response: chat.Response{Content: blocks, StopReason: chat.StopToolUse, Usage: usageOf(ef, text)}}
}

// usageOf is what the simulated provider reports a call used: the prompt
// it was sent and the answer, by the shared estimate.
func usageOf(ef core.CallModel, text string) chat.Usage {
	return chat.Usage{InputTokens: chat.EstimateTokens(ef.Messages), OutputTokens: int64(len(text)/4 + 1)}
}

func toolUse(ef core.CallModel, i int, name string, input any) chat.Block {
	b, _ := json.Marshal(input)
	return chat.Block{Type: chat.BlockToolUse, ID: fmt.Sprintf("tu_%s_%d", ef.Call, i), Name: name, Input: b}
}

func (w *world) toolCall(ef core.CallModel, a *core.Agent, i int) (chat.Block, bool) {
	switch k := w.rng.IntN(100); {
	case k < 25 && w.budget.spawns > 0:
		w.budget.spawns--
		w.names++
		name := fmt.Sprintf("w%d", w.names)
		if w.rng.IntN(10) == 0 && len(w.state.Order) > 1 {
			name = w.state.Agents[w.state.Order[1]].Name // a taken name: rejected
		}
		in := map[string]any{
			"description": "worker " + name, "prompt": w.token("task"), "name": name,
			"run_in_background": w.rng.IntN(5) != 0,
		}
		if w.limits.IntN(4) == 0 {
			in["budget_rounds"] = 1 + w.limits.IntN(6)
		}
		if a.Compacted != nil && w.limits.IntN(2) == 0 {
			// After a compaction the model starts what it already runs.
			for _, id := range w.state.TaskOrder {
				if t := w.state.Tasks[id]; t.Owner == a.ID && t.Kind == core.TaskAgent {
					in["prompt"] = t.Prompt
				}
			}
		}
		return toolUse(ef, i, "Agent", in), true
	case k < 50 && w.budget.sends > 0:
		w.budget.sends--
		return toolUse(ef, i, "SendMessage", map[string]any{
			"to": pick(w, w.agentNames(true)), "message": w.token("agent-msg"), "priority": string(w.priority()),
		}), true
	case k < 65 && w.budget.shells > 0:
		w.budget.shells--
		return toolUse(ef, i, "Bash", map[string]any{"command": "sim", "run_in_background": w.rng.IntN(4) != 0}), true
	case k < 72:
		ids := w.taskIDs()
		if len(ids) == 0 {
			return chat.Block{}, false
		}
		return toolUse(ef, i, "TaskOutput", map[string]any{
			"task_id": pick(w, ids), "block": w.rng.IntN(2) == 0, "timeout": 100 + w.rng.IntN(5000),
		}), true
	case k < 76:
		ids := w.taskIDs()
		if len(ids) == 0 {
			return chat.Block{}, false
		}
		return toolUse(ef, i, "TaskStop", map[string]any{"task_id": pick(w, ids)}), true
	case k < 82 && w.budget.timers > 0:
		w.budget.timers--
		return toolUse(ef, i, "ScheduleWakeup", map[string]any{"prompt": w.token("timer"), "delay_seconds": 1 + w.rng.IntN(20)}), true
	case k < 90:
		return toolUse(ef, i, "Read", map[string]any{"file_path": "README.md"}), true
	case k < 95:
		return toolUse(ef, i, "Write", map[string]any{"file_path": "out.txt", "content": "x"}), true
	default:
		return toolUse(ef, i, "ListAgents", map[string]any{}), true
	}
}

// answerApprovals schedules a person's answer to each new permission
// request; some are left to their deadline.
func (w *world) answerApprovals(events []core.Event) {
	for _, e := range events {
		b, ok := e.Body.(*core.ApprovalRequested)
		if !ok || w.rng.IntN(8) == 0 {
			continue
		}
		id := b.Approval.ID
		allow := w.rng.IntN(4) != 0
		var input json.RawMessage
		if allow && b.Approval.Tool == "Bash" && b.Approval.External == "" && w.limits.IntN(4) == 0 {
			// The person allows a changed command.
			input = json.RawMessage(`{"command":"echo changed by a person"}`)
		}
		w.schedule(w.at(w.latency(10, 20000)), 0, "answer approval", func() core.Input {
			if w.state.Approvals[id] == nil {
				return nil
			}
			return core.AnswerApproval{Approval: id, Allow: allow, By: "sim", Input: input}
		})
	}
}

// outage is a window of virtual time in which the simulated provider
// fails every model call with one kind of failure.
type outage struct {
	from, to time.Time
	kind     core.FailureKind
}

func (o outage) covers(t time.Time) bool {
	return !o.from.IsZero() && !t.Before(o.from) && t.Before(o.to)
}

// answerBlocks schedules a person's retry of every agent that a failure
// blocked, as a user would after reading the status; it may come while
// the outage lasts, and then the agent is blocked again.
func (w *world) answerBlocks(events []core.Event) {
	for _, e := range events {
		// A spent budget is not retried: a person raises it (the "raise
		// budget" action), which releases the agents it blocked.
		if b, ok := e.Body.(*core.AgentBlocked); ok && b.Block.Kind != core.FailBudget {
			w.retryLater(b.Agent)
		}
	}
}

// retryLater has the simulated user retry a blocked agent after a while.
func (w *world) retryLater(agent core.AgentID) {
	{
		w.schedule(w.now.Add(time.Duration(100+w.faults.IntN(8000))*time.Millisecond), 0, "user retries", func() core.Input {
			if a := w.state.Agents[agent]; a == nil || a.Blocked == nil {
				return nil
			}
			return core.RetryAgent{Agent: string(agent), By: "sim"}
		})
	}
}
