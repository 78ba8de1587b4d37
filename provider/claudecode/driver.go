package claudecode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
)

// Name is the driver's name, as sessions name their provider.
const Name = "claude-code"

// Defaults applied to an Options' zero fields.
const (
	DefaultPath           = "claude"
	DefaultMaxDeferral    = 30 * time.Minute
	DefaultCloseGrace     = 2 * time.Second
	DefaultControlTimeout = 10 * time.Second
	DefaultStderrTail     = 4096
	// MaxLineBytes bounds one output line; a longer one is dropped as
	// malformed.
	MaxLineBytes = 64 << 20
)

// SessionEnv is the environment variable set on every CLI process to the
// vigil session it runs, so an operator can find the processes.
const SessionEnv = "VIGIL_SESSION"

// Options configures a Driver. Zero fields mean defaults.
type Options struct {
	// Path is the claude executable: a path, or a name looked up on PATH
	// (DefaultPath).
	Path string
	// Env holds extra environment entries ("KEY=value") on top of the
	// allowlisted part of vigil's own environment, e.g. ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY. The
	// driver never logs them.
	Env []string
	// PassEnv names more variables of vigil's environment the CLI gets,
	// beyond the allowlist (see Driver.env); the configuration's
	// command_env.
	PassEnv []string
	// Args are extra command-line arguments, after the driver's own.
	Args []string
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// IdleRelease ends a process that has had no turn in progress and no
	// live background task for this long, to save memory; the next
	// delivery starts a new one with --resume. Zero never releases.
	IdleRelease time.Duration
	// MaxDeferral bounds how long an idle release waits for live background
	// tasks; then the process is ended anyway and its tasks end lost
	// (DefaultMaxDeferral).
	MaxDeferral time.Duration
	// Model is the model to ask for when the session names none; empty
	// leaves it to the CLI.
	Model string
	// CloseGrace is how long Close waits after closing stdin before it
	// sends SIGTERM to the process group, and again before SIGKILL
	// (DefaultCloseGrace).
	CloseGrace time.Duration
	// ControlTimeout bounds the wait for the answer to a control request
	// (DefaultControlTimeout).
	ControlTimeout time.Duration
	// Clock is the time source of idle release and Close; nil means the
	// real clock.
	Clock shell.Clock
}

// Driver runs Claude Code CLI processes, one per agent. It implements
// provider.SessionDriver.
type Driver struct {
	opts  Options
	log   *slog.Logger
	stats counters

	mu     sync.Mutex
	procs  map[*process]struct{}
	closed bool
}

var _ provider.SessionDriver = (*Driver)(nil)

// New returns a driver.
func New(opts Options) *Driver {
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxDeferral <= 0 {
		opts.MaxDeferral = DefaultMaxDeferral
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	if opts.ControlTimeout <= 0 {
		opts.ControlTimeout = DefaultControlTimeout
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	return &Driver{opts: opts, log: opts.Logger, procs: map[*process]struct{}{}}
}

// Name returns "claude-code".
func (d *Driver) Name() string { return Name }

// Start starts a CLI process for one agent. The process takes no turn
// until the first Deliver (or, with Resume, until the CLI reports work of
// the resumed session on its own).
func (d *Driver) Start(ctx context.Context, p *provider.SessionStart) (provider.SessionProcess, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errors.New("start claude: driver closed")
	}
	path, err := exec.LookPath(d.opts.Path)
	if err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	emit := p.Emit
	if emit == nil {
		emit = func(core.Input) {}
	}
	args := d.args(p)
	pr := newProcess(d, p, emit)
	if err := pr.start(path, args, d.env(p), p.Cwd); err != nil {
		return nil, fmt.Errorf("start claude: %w", err)
	}
	d.mu.Lock()
	d.procs[pr] = struct{}{}
	d.mu.Unlock()
	d.log.Info("claude code: process started", "session", p.Session, "agent", p.Agent, "pid", pr.pid, "resume", p.Resume, "args", args)
	return pr, nil
}

// args builds the command line.
func (d *Driver) args(p *provider.SessionStart) []string {
	args := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"}
	if p.Resume != "" {
		args = append(args, "--resume", p.Resume)
	}
	model := p.Model
	if model == "" {
		model = d.opts.Model
	}
	if model != "" {
		args = append(args, "--model", model)
	}
	switch p.PermissionMode {
	case core.PermBypass:
		args = append(args, "--dangerously-skip-permissions")
	case core.PermAcceptEdits:
		args = append(args, "--permission-mode", "acceptEdits", "--permission-prompt-tool", "stdio")
	case core.PermAuto:
		args = append(args, "--permission-mode", "auto")
	default:
		// ask: the CLI's default mode. What needs a prompt is asked of
		// vigil over stdin/stdout (control_request can_use_tool), which
		// answers from the session's rules or asks a person.
		args = append(args, "--permission-prompt-tool", "stdio")
	}
	return append(args, d.opts.Args...)
}

// env builds the process environment: an allowlist of vigil's own (see
// internal/cmdenv: PATH, HOME, the locale, the terminal, the user, plus
// the CLI's ANTHROPIC_* and CLAUDE_* settings, proxy and certificate
// settings, and Options.PassEnv), then the options' entries, the session
// marker and, for bypass as root, IS_SANDBOX=1 (the CLI refuses
// --dangerously-skip-permissions as root without it). vigil's own settings
// (VIGIL_*: its database address, its token) never reach the CLI, whose
// commands would print them into the transcript.
func (d *Driver) env(p *provider.SessionStart) []string {
	set := append(append([]string(nil), d.opts.Env...), SessionEnv+"="+p.Session)
	if p.PermissionMode == core.PermBypass && os.Geteuid() == 0 {
		set = append(set, "IS_SANDBOX=1")
	}
	names := append([]string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
		"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"}, d.opts.PassEnv...)
	return cmdenv.Build(os.Environ(), cmdenv.Spec{Names: names, Prefixes: []string{"ANTHROPIC_", "CLAUDE_", "DISABLE_"},
		Drop: []string{"CLAUDE_CODE_ENTRYPOINT"}, Set: set})
}

// Close ends every process the driver started and waits until each has
// exited and reported ProviderExited, or ctx ends. Later Starts fail. It is
// safe to call twice.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	var procs []*process
	for p := range d.procs {
		procs = append(procs, p)
	}
	d.mu.Unlock()
	for _, p := range procs {
		p.end(causeClosed)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("close claude driver: %w", ctx.Err())
		}
	}
	return nil
}

func (d *Driver) forget(p *process) {
	d.mu.Lock()
	delete(d.procs, p)
	d.mu.Unlock()
}

// Stats counts what the driver skipped or did on its own, for metrics.
type Stats struct {
	// MalformedLines counts output lines that were not JSON (dropped, at
	// warn).
	MalformedLines int64
	// UndecodableFrames counts JSON frames whose fields had unexpected
	// types, and task frames of unknown kind (dropped, at warn).
	UndecodableFrames int64
	// UnknownFrames counts frames of a type the driver does not know
	// (ignored, at debug).
	UnknownFrames int64
	// IgnoredFrames counts known frames that map to nothing (progress,
	// status; at debug).
	IgnoredFrames int64
	// FilteredTasks counts frames of subagents' foreground tasks left out.
	FilteredTasks int64
	// EmptyTurns counts the no-op num_turns:0 turns passed over.
	EmptyTurns int64
	// StaleTasks counts reports of tasks of a previous process (after
	// --resume) passed over, at info: those tasks ended lost when that
	// process exited.
	StaleTasks int64
	// IdleReleases counts processes ended by idle release, and
	// ForcedReleases those of them ended with live tasks after
	// MaxDeferral.
	IdleReleases   int64
	ForcedReleases int64
	// Deferrals counts idle releases put off for live background tasks.
	Deferrals int64
}

type counters struct {
	malformed, undecodable, unknownFrames, ignoredFrames, filteredTasks, emptyTurns, staleTasks atomic.Int64
	idleReleases, forcedReleases, deferrals                                                     atomic.Int64
}

// Stats returns the driver's counters.
func (d *Driver) Stats() Stats {
	c := &d.stats
	return Stats{
		MalformedLines: c.malformed.Load(), UndecodableFrames: c.undecodable.Load(), UnknownFrames: c.unknownFrames.Load(),
		IgnoredFrames: c.ignoredFrames.Load(), FilteredTasks: c.filteredTasks.Load(), EmptyTurns: c.emptyTurns.Load(), StaleTasks: c.staleTasks.Load(),
		IdleReleases: c.idleReleases.Load(), ForcedReleases: c.forcedReleases.Load(), Deferrals: c.deferrals.Load(),
	}
}

type realClock struct{}

// Now implements shell.Clock.
func (realClock) Now() time.Time { return time.Now() }

// AfterFunc implements shell.Clock.
func (realClock) AfterFunc(d time.Duration, f func()) shell.Timer { return time.AfterFunc(d, f) }
