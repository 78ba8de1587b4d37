package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/config"
	"github.com/vigilrun/vigil/internal/text"
)

// stringList is a repeatable string flag.
type stringList []string

// String implements fmt.Stringer.
func (l *stringList) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func cmdRun(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	format := fs.String("output-format", "text", "text (a timeline, then the reply), json (one object at the end) or stream-json (one event per line)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long, stating what was still pending")
	cwd := fs.String("cwd", ".", "working directory of the session's file tools and shell commands")
	mode := fs.String("permission-mode", "auto", "ask, accept-edits, auto (allow rules decide, the rest is denied: nobody answers a one-shot run) or bypass")
	var allow, deny stringList
	fs.Var(&allow, "allow", "allow rule, e.g. 'Bash(go test *)' (repeatable)")
	fs.Var(&deny, "deny", "deny rule (repeatable)")
	verbose := fs.Bool("v", false, "log at debug level to stderr")
	var bf budgetFlags
	bf.register(fs)
	keepOpen := fs.Bool("keep-open", false, "leave the session open when it is quiescent (vigil serve or a later run can continue it)")
	resume := fs.String("resume", "", "take over an existing session of the store (one a killed vigil left) and run it to quiescence; a prompt, if given, is queued to it")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: vigil run [flags] \"prompt\"\n\nRuns one session until it is quiescent (no run in progress, no live task, every inbox empty)\nand prints its timeline and the main agent's final reply.\n\n"+permissionDefaults+"\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() > 1 || (*resume == "" && (fs.NArg() != 1 || strings.TrimSpace(fs.Arg(0)) == "")) {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("give exactly one prompt")}
	}
	switch *format {
	case "text", "json", "stream-json":
	default:
		return &exitError{code: 2, err: fmt.Errorf("unknown --output-format %q", *format)}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	provs, err := pf.build(e, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	tr, err := setupTracing(ctx, e.getenv)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// Flushed after the runtime closed, so the last runs' spans go too.
	defer func() {
		if err := tr.shutdown(); err != nil {
			logger.Warn("traces were not all exported", "err", err)
		}
	}()
	st, dataDir, node, closeStore, err := sf.open(ctx, e, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, Drivers: provs.drivers, DefaultProvider: provs.name, DataDir: dataDir, Node: node, Logger: logger,
		TracerProvider: tr.tracerProvider(), TraceContent: tr.content,
		// A headless run takes over only the session it resumes; other
		// open sessions of the store are left to their owners or to serve.
		Adopt: func(s vigil.SessionSummary) bool { return string(s.ID) == *resume },
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	if provs.note != "" && *format == "text" {
		fmt.Fprintln(e.stdout, provs.note)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c := provs.cfg; c != nil {
		// The config file's permissions apply unless a flag says otherwise.
		if !set["permission-mode"] && c.PermissionMode != "" {
			*mode = c.PermissionMode
		}
		if !set["allow"] {
			allow = c.AllowFor(*cwd)
		}
		if !set["deny"] {
			deny = c.Deny
		}
	}
	var id vigil.SessionID
	closedAlready := false
	if *resume != "" {
		if sf.memory {
			return &exitError{code: 2, err: errors.New("--resume needs a durable store, not --memory")}
		}
		id = vigil.SessionID(*resume)
		prev, err := rt.SessionGet(ctx, id, nil)
		if err != nil {
			return fmt.Errorf("resume %s: %w", id, err)
		}
		closedAlready = prev.Session.Closed
		if fs.NArg() == 1 {
			if _, err := rt.Prompt(ctx, id, &vigil.PromptParams{Text: fs.Arg(0), Priority: vigil.PriorityNext}); err != nil {
				return err
			}
		}
	} else {
		sess, err := rt.CreateSession(ctx, &vigil.SessionParams{
			Title: text.FirstLine(fs.Arg(0), 60), Prompt: fs.Arg(0), Provider: provs.name, Model: provs.model,
			SubagentModel: provs.subagentModel, Cwd: *cwd,
			Permissions: vigil.Permissions{Mode: vigil.PermissionMode(*mode), Allow: allow, Deny: deny},
			Budget:      bf.budget(),
		})
		if err != nil {
			return err
		}
		id = sess.ID
	}
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	sub, err := rt.Subscribe(tctx, &vigil.SubscribeParams{Session: id})
	if err != nil {
		return err
	}
	printer := newTimeline(e.stdout, start, *format)
	printed := make(chan struct{})
	target := make(chan int64, 1)
	go func() {
		defer close(printed)
		want := int64(-1)
		for {
			select {
			case ev, ok := <-sub.C:
				if !ok {
					return
				}
				printer.record(ev)
				if want >= 0 && ev.Seq >= want {
					return
				}
			case want = <-target:
				if printer.last >= want {
					return
				}
			}
		}
	}()
	var waitErr error
	if !closedAlready { // a session closed before is done: just report it
		waitErr = rt.WaitQuiescent(tctx, id)
		if errors.Is(waitErr, vigil.ErrNotFound) {
			return fmt.Errorf("session %s is held by another live vigil process, which will finish it", id)
		}
	}
	blocked := false
	if d, err := rt.SessionGet(ctx, id, nil); err == nil {
		for _, a := range d.Agents {
			if a.Blocked != nil && len(a.Inbox) > 0 && a.State != vigil.AgentClosed {
				blocked = true
			}
		}
	}
	if waitErr == nil && !*keepOpen && !closedAlready && !blocked {
		// Done: close the session so no later vigil takes it over.
		if err := rt.CloseSession(ctx, id, "vigil run"); err != nil && vigil.CodeOf(err) != vigil.CodeClosed {
			logger.Warn("could not close the finished session", "session", id, "err", err)
		}
	}
	// Print every event committed up to now before the result.
	s, serr := rt.SessionGet(ctx, id, nil)
	var mainRuns []vigil.Run
	if serr == nil {
		mainRuns, serr = rt.RunList(ctx, id, string(vigil.MainAgent))
	}
	if serr == nil {
		target <- s.Seq
		select {
		case <-printed:
		case <-ctx.Done():
		}
	}
	sub.Close()
	<-printed
	if serr != nil {
		return serr
	}
	res := summarize(s, mainRuns, time.Since(start))
	if blocked && waitErr == nil {
		// Left open: what the blocked agents hold is still owed to their
		// model. A new prompt (--resume ID "…") or vigil retry goes on.
		res.Status = "blocked"
		res.Pending = pending(s)
	}
	if waitErr != nil {
		res.Status = "timeout"
		if ctx.Err() != nil {
			res.Status = "interrupted"
		}
		res.Pending = pending(s)
	}
	if err := printer.result(res, sf.memory); err != nil {
		return err
	}
	switch {
	case waitErr != nil && ctx.Err() != nil:
		return &exitError{code: 130}
	case waitErr != nil:
		return &exitError{code: 2}
	case blocked:
		return &exitError{code: 4}
	case res.MainStatus != "completed":
		return &exitError{code: 3}
	}
	return nil
}

// result is what vigil run reports at the end.
type result struct {
	Session       string `json:"session"`
	Status        string `json:"status"` // quiescent, blocked, timeout, interrupted
	Reply         string `json:"reply"`
	MainStatus    string `json:"main_status"`
	DurationMS    int64  `json:"duration_ms"`
	Runs          int    `json:"runs"`
	Notifications int    `json:"notifications"`
	Messages      int    `json:"messages"`
	InputTokens   int64  `json:"input_tokens"`
	OutputTokens  int64  `json:"output_tokens"`
	Drops         int    `json:"drops"`
	// Spent is what the whole session used, cache tokens and cost
	// included; Compactions counts context compactions.
	Spent       vigil.Spend `json:"spent"`
	Compactions int         `json:"compactions"`
	Pending     []string    `json:"pending,omitempty"`
}

// summarize reports a session from its detail and its main agent's runs
// (vigil.Runtime.RunList).
func summarize(d *vigil.SessionDetail, mainRuns []vigil.Run, dur time.Duration) result {
	r := result{Session: string(d.Session.ID), Status: "quiescent", DurationMS: dur.Milliseconds(), Notifications: d.NotificationCount, Messages: d.MessageCount, Spent: d.Spent}
	for _, a := range d.Agents {
		r.Runs += a.Runs
		r.InputTokens += a.Usage.InputTokens
		r.OutputTokens += a.Usage.OutputTokens
		r.Compactions += a.Compactions
	}
	for _, n := range d.Drops {
		r.Drops += n
	}
	// The last run that ended: RunList ends with the one in progress, if any.
	for i := len(mainRuns) - 1; i >= 0; i-- {
		if run := mainRuns[i]; run.Status != vigil.RunRunning {
			r.Reply, r.MainStatus = run.Reply, string(run.Status)
			if run.Error != "" {
				r.Reply = "error: " + run.Error
			}
			break
		}
	}
	return r
}

// pending lists what keeps a session from being quiescent.
func pending(d *vigil.SessionDetail) []string {
	var out []string
	for _, a := range d.Agents {
		if r := a.Run; r != nil {
			what := fmt.Sprintf("run %s#%d in progress", a.Name, r.Seq)
			if r.Call != nil {
				what += fmt.Sprintf(" (model call %s %s)", r.Call.ID, r.Call.State)
			} else if n := len(r.Tools); n > 0 {
				what += fmt.Sprintf(" (%d tool call(s) running)", n)
			}
			out = append(out, what)
		}
	}
	for _, st := range d.Status {
		out = append(out, fmt.Sprintf("inbox of %s: %d item(s): %s", st.Name, st.Items, st.Reason))
	}
	for _, t := range d.Tasks {
		if t.Kind == vigil.TaskShell && t.Live() {
			out = append(out, fmt.Sprintf("task %s %s: %s", t.ID, t.Status, t.Command))
		}
	}
	for _, t := range d.Timers {
		out = append(out, fmt.Sprintf("wakeup %s for %s at %s", t.ID, t.Agent, t.At.Format(time.RFC3339)))
	}
	for _, p := range d.Approvals {
		out = append(out, fmt.Sprintf("permission request %s (%s) waits for an answer", p.ID, p.Tool))
	}
	return out
}

// storeFlags choose where sessions are kept, and how agents' commands are
// confined.
type storeFlags struct {
	memory  bool
	data    string
	db      string
	sandbox string
	network bool
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.sandbox, "sandbox", "", "confine agents' commands: read-only, workspace-write (the session's directories; .git read-only) or full-access\n(default: the config's sandbox.mode, else workspace-write where the kernel allows)")
	fs.BoolVar(&f.network, "network", false, "let confined commands use the network (default: the config's sandbox.network, else off)")
	fs.BoolVar(&f.memory, "memory", false, "keep the session in memory only (nothing survives the process)")
	fs.StringVar(&f.data, "data", "", "data directory (default: $VIGIL_DATA, else $XDG_DATA_HOME/vigil, else ~/.local/share/vigil)")
	fs.StringVar(&f.db, "db", "", "database: a postgres:// URL (default: $VIGIL_DB, else SQLite in the data directory)")
}

// dataDir returns the data directory.
func (f *storeFlags) dataDir(e *env) (string, error) {
	if f.data != "" {
		return f.data, nil
	}
	if d := e.getenv("VIGIL_DATA"); d != "" {
		return d, nil
	}
	if d := e.getenv("XDG_DATA_HOME"); d != "" {
		return d + "/vigil", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find a data directory (set --data or VIGIL_DATA): %w", err)
	}
	return home + "/.local/share/vigil", nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// budgetFlags are a session's budget on the command line (DESIGN rule 10);
// unset ones keep the configured defaults.
type budgetFlags struct {
	tokens int64
	rounds int
	wall   time.Duration
	usd    float64
}

func (b *budgetFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&b.tokens, "budget-tokens", 0, "bound the session to this many tokens, input and output (default: the config's budgets.tokens, else 50,000,000)")
	fs.IntVar(&b.rounds, "budget-rounds", 0, "bound the session to this many model rounds (default: budgets.rounds, else 5,000)")
	fs.DurationVar(&b.wall, "budget-wall", 0, "bound the session's run time, summed over its runs (default: budgets.wall, else 24h)")
	fs.Float64Var(&b.usd, "budget-usd", 0, "bound the session's cost in US dollars, over models with a known price (default: budgets.cost_usd, else 100)")
}

func (b *budgetFlags) budget() vigil.Budget {
	return vigil.Budget{Tokens: b.tokens, Rounds: b.rounds, Wall: b.wall, CostMicros: int64(b.usd * 1e6)}
}

// sandboxOptions merges the flags into the configuration's sandbox. The
// user's configuration directory (~/.config/vigil: the config file, the
// saved rules) is kept read-only for confined commands, so none can turn
// the sandbox off or add rules for a later session; it is made when
// missing, so that it can be.
func (f *storeFlags) sandboxOptions(cfg *config.Config) vigil.Sandbox {
	sb := vigil.Sandbox{}
	if cfg != nil {
		sb = vigil.Sandbox{Mode: cfg.Sandbox.Mode, Network: cfg.Sandbox.Network, WritableGit: cfg.Sandbox.WritableGit}
		if cfg.RulesPath != "" {
			dir := filepath.Dir(cfg.RulesPath)
			if err := os.MkdirAll(dir, 0o700); err == nil {
				sb.Protect = append(sb.Protect, dir)
			}
		}
	}
	if f.sandbox != "" {
		sb.Mode = f.sandbox
	}
	sb.Network = sb.Network || f.network
	return sb
}
