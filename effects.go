package vigil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/admit"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/sandbox"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/internal/tool"
	"github.com/vigilrun/vigil/provider"
)

// startEffects starts a committed step's effects. Every outcome comes back
// through submitEffect from another goroutine.
func (a *actor) startEffects(effects []core.Effect) {
	for _, ef := range effects {
		switch ef := ef.(type) {
		case core.CallModel:
			a.startCall(ef)
		case core.CancelCall:
			a.cancelKey("call/" + string(ef.Call))
			delete(a.started, ef.Call)
		case core.ExecTool:
			a.startTool(ef)
		case core.CancelTool:
			a.cancelKey("tool/" + string(ef.Agent) + "/" + ef.UseID)
		case core.StartShell:
			a.startShell(ef)
		case core.StopShell:
			if p := a.procs[ef.Task]; p != nil {
				go p.Stop()
			}
		case core.Deliver:
			a.extFor(ef.Agent).deliver(ef)
		case core.Interrupt:
			if x := a.ext[ef.Agent]; x != nil {
				x.do(func(p provider.SessionProcess) error { return p.Interrupt() })
			} else {
				a.rt.log.Warn("interrupt for an agent with no provider process; nothing to interrupt", "session", a.id, "agent", ef.Agent)
			}
		case core.StopExternal:
			if x := a.ext[ef.Agent]; x != nil {
				x.do(func(p provider.SessionProcess) error { return p.StopTask(ef.Task) })
			} else {
				a.rt.log.Warn("stop of a provider task with no provider process", "session", a.id, "agent", ef.Agent, "task", ef.Task)
			}
		case core.StopProvider:
			if x := a.ext[ef.Agent]; x != nil {
				x.do(func(p provider.SessionProcess) error { return p.Close() })
			}
		case core.AnswerPermission:
			if x := a.ext[ef.Agent]; x != nil {
				x.do(func(p provider.SessionProcess) error {
					return p.AnswerPermission(ef.Request, ef.Allow, ef.Reason, ef.Input)
				})
			} else {
				a.rt.log.Warn("a permission answer for an agent with no provider process; nobody waits for it", "session", a.id, "agent", ef.Agent, "request", ef.Request)
			}
		default:
			a.rt.log.Error("unknown effect; ignored", "session", a.id, "effect", core.EffectName(ef))
		}
	}
}

func (a *actor) cancelKey(k string) {
	if c := a.cancels[k]; c != nil {
		c()
		delete(a.cancels, k)
	}
}

// startCall performs a model call through the session's provider.
func (a *actor) startCall(ef core.CallModel) {
	key := "call/" + string(ef.Call)
	if _, running := a.cancels[key]; running {
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.cancels[key] = cancel
	a.started[ef.Call] = a.rt.clock.Now()
	name := ef.Provider
	if name == "" {
		name = a.rt.opts.DefaultProvider
	}
	p := a.rt.opts.Providers[name]
	req := &provider.Request{
		CallID: string(a.id) + "/" + string(ef.Call), Session: string(a.id), Agent: string(ef.Agent),
		AgentName: ef.AgentName, Model: ef.Model, System: systemPrompt(a.state, ef), Messages: ef.Messages,
		// A compaction request keeps the tools: its prompt holds tool
		// calls and results, which the Anthropic API refuses without the
		// tools' definitions, and the same tools keep the cached prefix.
		Tools: a.rt.specsFor(SessionID(a.id)), Purpose: ef.Purpose,
	}
	go func() {
		if ef.Background {
			// New background work starts when nothing more urgent waits
			// for the node's processors.
			a.rt.gate.Admit(admit.Start)
		}
		if p == nil {
			a.submitEffect(core.ModelFailed{Agent: ef.Agent, Call: ef.Call, Error: fmt.Sprintf("no provider %q is configured", name), Kind: core.FailInvalid})
			return
		}
		// The text streams to the subscribers as it comes (live events),
		// on this goroutine, which never waits on them.
		live := a.liveTextOf(ef)
		resp, err := provider.Collect(p.Stream(ctx, req), func(ev provider.Event) {
			switch ev.Type {
			case provider.EventText:
				live.text(ev.Text)
			case provider.EventRetry:
				live.reset() // what streamed of the failed attempt is void
				if ev.Retry != nil {
					a.submitEffect(core.ModelRetrying{
						Agent: ef.Agent, Call: ef.Call, Attempt: ev.Retry.Attempt,
						Until: a.rt.clock.Now().Add(ev.Retry.Delay), Reason: ev.Retry.Reason,
					})
				}
			}
		})
		if ctx.Err() != nil {
			return // cancelled by the core: nobody waits for this answer
		}
		if err != nil {
			a.submitEffect(core.ModelFailed{Agent: ef.Agent, Call: ef.Call, Error: err.Error(), Kind: provider.FailureOf(err)})
			return
		}
		a.submitEffect(core.ModelResponded{Agent: ef.Agent, Call: ef.Call, Response: *resp})
	}()
}

// systemPrompt tells an agent who it is and how vigil's tools behave.
func systemPrompt(s *core.State, ef core.CallModel) string {
	var b strings.Builder
	if ef.IsMain {
		b.WriteString("You are the main agent of a vigil session.")
	} else {
		fmt.Fprintf(&b, "You are %s, a subagent in a vigil session.", ef.AgentName)
		if a := s.Agents[ef.Agent]; a != nil && a.Owner != "" {
			if o := s.Agents[a.Owner]; o != nil {
				fmt.Fprintf(&b, " Your owner is %s; your final answer of each run is delivered to it as a notification.", o.Name)
			}
		}
	}
	b.WriteString(`
Background work: Agent with run_in_background and Bash with run_in_background return at once; each time such work finishes you receive a <task-notification> in a later turn, exactly once. You may end your turn while work runs: you will be woken.
SendMessage returns at once and tells you what happened: joined (the running turn sees it), queued-behind-stop (the agent is finishing its run; its next run answers), resumed (it was idle and started), rejected (with the reason), or pending (its model round is in flight: the message joins that run, or the next run answers; the result names both).`)
	if s.Session.Cwd != "" {
		fmt.Fprintf(&b, "\nWorking directory: %s", s.Session.Cwd)
	}
	return b.String()
}

// startTool executes a tool call outside the core.
func (a *actor) startTool(ef core.ExecTool) {
	key := "tool/" + string(ef.Agent) + "/" + ef.UseID
	if _, running := a.cancels[key]; running {
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.cancels[key] = cancel
	env := toolEnv{session: a.id, sessionDir: a.rt.sessionDir(a.id), roots: a.state.Session.Roots(), perms: a.state.Session.Permissions.Clone()}
	if ag := a.state.Agents[ef.Agent]; ag != nil && ag.Run != nil {
		for _, tc := range ag.Run.Tools {
			if tc.UseID == ef.UseID {
				env.approved = tc.Approval != ""
			}
		}
	}
	go func() {
		res, isErr := a.rt.execTool(ctx, env, ef)
		if ctx.Err() != nil {
			return
		}
		a.submitEffect(core.ToolDone{Agent: ef.Agent, UseID: ef.UseID, Result: res, IsError: isErr})
	}()
}

// toolEnv is what a tool call runs with, copied from the session's state
// on the actor goroutine.
type toolEnv struct {
	session    core.SessionID
	sessionDir string
	roots      []string
	perms      core.Permissions
	// approved: a person (or a rule they added) answered this call's
	// permission request.
	approved bool
}

func (r *Runtime) execTool(ctx context.Context, env toolEnv, ef core.ExecTool) (string, bool) {
	switch ef.Name {
	case "Bash":
		return r.execBash(ctx, env, ef)
	case "TaskOutput":
		return r.execTaskOutput(ctx, env, ef.Input)
	case "Read", "Write", "Edit", "Glob", "Grep":
		if len(env.roots) == 0 {
			return "Error: this session has no working directory; file tools are unavailable", true
		}
		// The rules are checked again on the path the call really touches
		// (after .., symlinks and absolute forms), here where the file
		// system can be asked.
		ws := tool.Workspace{Roots: env.roots, Permissions: &tool.Permissions{
			Mode: string(env.perms.Mode), Allow: env.perms.Allow, Deny: env.perms.Deny, Approved: env.approved,
		}}
		// The file tools keep the sandbox's write rules too.
		switch sandbox.Mode(r.iso.Sandbox) {
		case sandbox.ReadOnly:
			ws.ReadOnly = true
		case sandbox.WorkspaceWrite:
			ws.ReadOnlyPaths = append(ws.ReadOnlyPaths, r.opts.Sandbox.Protect...)
			if !r.iso.WritableGit {
				for _, root := range env.roots {
					ws.ReadOnlyPaths = append(ws.ReadOnlyPaths, filepath.Join(root, ".git"))
				}
			}
		}
		return ws.Exec(ctx, ef.Name, ef.Input)
	default:
		if ts := r.toolsOf(SessionID(env.session)); ts != nil {
			for _, s := range ts.Specs() {
				if s.Name == ef.Name {
					return ts.Call(ctx, ef.Name, ef.Input)
				}
			}
		}
		return fmt.Sprintf("Error: unknown tool %q", ef.Name), true
	}
}

func (r *Runtime) execBash(ctx context.Context, env toolEnv, ef core.ExecTool) (string, bool) {
	var in struct {
		Command string `json:"command"`
		Timeout int64  `json:"timeout"`
	}
	if err := json.Unmarshal(ef.Input, &in); err != nil || strings.TrimSpace(in.Command) == "" {
		return "Error: command is required", true
	}
	timeout := 2 * time.Minute
	if in.Timeout > 0 {
		timeout = min(time.Duration(in.Timeout)*time.Millisecond, 10*time.Minute)
	}
	dir := ""
	if len(env.roots) > 0 {
		dir = env.roots[0]
	}
	out := filepath.Join(env.sessionDir, "tools", sanitize(string(ef.Agent)+"-"+ef.UseID)+".output")
	res := shell.Run(ctx, shell.Spec{Command: in.Command, Dir: dir, Timeout: timeout, Clock: r.clock, OutputPath: out, TailBytes: r.opts.MaxToolOutput, Env: r.commandEnv(),
		Cgroup: r.cgroupFor(env.session, "tool-"+string(ef.Agent)+"-"+ef.UseID), Wrap: r.wrapFor(env)})
	var b strings.Builder
	b.WriteString(res.Tail)
	if res.Truncated || res.OutputBytes > int64(len(res.Tail)) {
		fmt.Fprintf(&b, "\n[vigil: output was %d bytes; the last %d are shown; all of it is in %s]", res.OutputBytes, len(res.Tail), out)
	}
	switch {
	case res.Err != "":
		fmt.Fprintf(&b, "\n[error: %s]", res.Err)
		return b.String(), true
	case res.TimedOut:
		fmt.Fprintf(&b, "\n[killed after the %s timeout]", timeout)
		return b.String(), true
	case res.ExitCode != 0:
		fmt.Fprintf(&b, "\n[exit code %d%s]", res.ExitCode, signalNote(res.Signal))
		return b.String(), true
	}
	return b.String(), false
}

func signalNote(sig string) string {
	if sig == "" {
		return ""
	}
	return ", " + sig
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

func (r *Runtime) execTaskOutput(ctx context.Context, env toolEnv, input json.RawMessage) (string, bool) {
	var in core.TaskOutputRequest
	if err := json.Unmarshal(input, &in); err != nil {
		return "Error: invalid input: " + err.Error(), true
	}
	if in.OutputPath == "" || strings.Contains(in.OutputPath, "..") {
		return "Error: task has no output file", true
	}
	limit := in.Limit
	if limit <= 0 || limit > int64(r.opts.MaxToolOutput) {
		limit = int64(r.opts.MaxToolOutput)
	}
	data, next, err := shell.ReadOutput(filepath.Join(env.sessionDir, filepath.FromSlash(in.OutputPath)), in.Offset, limit)
	if errors.Is(err, fs.ErrNotExist) && r.cl != nil {
		// Run by a node that is gone: its output is in the store.
		data, next, err = r.storedOutput(ctx, env.session, core.TaskID(in.TaskID), in.Offset, limit)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "Error: read output: " + err.Error(), true
	}
	b, _ := json.Marshal(core.TaskOutputResult{TaskID: in.TaskID, Status: in.Status, Output: string(data), NextOffset: next, ExitCode: in.ExitCode})
	return string(b), false
}

// startShell starts a background shell task's process.
func (a *actor) startShell(ef core.StartShell) {
	out, err := a.rt.resolveOutput(a.id, ef.OutputPath)
	if err != nil {
		go a.submitEffect(core.ShellStartFailed{Task: ef.Task, Error: err.Error()})
		return
	}
	cg := a.rt.cgroupFor(a.id, "task-"+string(ef.Task))
	env := toolEnv{session: a.id, sessionDir: a.rt.sessionDir(a.id), roots: a.state.Session.Roots(), perms: a.state.Session.Permissions.Clone()}
	p, err := shell.Start(shell.Spec{Command: ef.Command, Dir: ef.Cwd, Timeout: ef.Timeout, Clock: a.rt.clock, OutputPath: out, Env: a.rt.commandEnv(), Cgroup: cg, Wrap: a.rt.wrapFor(env)})
	if err != nil {
		go a.submitEffect(core.ShellStartFailed{Task: ef.Task, Error: err.Error()})
		return
	}
	a.procs[ef.Task] = p
	if a.rt.cl != nil {
		a.rt.cl.saves.Add(1)
	}
	go func() {
		a.submitEffect(core.ProcessStarted{Task: ef.Task, PID: p.PID(), StartTicks: p.StartTime(), Cgroup: cg})
		res := p.Wait()
		if a.rt.cl != nil {
			a.rt.saveOutput(a.id, ef.Task, out)
			a.rt.cl.saves.Done()
		}
		a.submitEffect(core.ProcessExited{
			Task: ef.Task, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
			Stopped: res.Stopped, Tail: tail(res.Tail, 2000),
		})
	}()
}

// tail returns the last n bytes of s, cut at a character boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return "…" + s[i:]
}

// commandEnv is the environment of the commands an agent runs: an
// allowlist of vigil's own (internal/cmdenv) plus the names the
// configuration lists, never vigil's settings or secrets.
func (r *Runtime) commandEnv() []string {
	return cmdenv.Build(os.Environ(), cmdenv.Spec{Names: r.opts.CommandEnv})
}
