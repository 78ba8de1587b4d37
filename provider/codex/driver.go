package codex

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
	"github.com/vigilrun/vigil/internal/clock"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/shell"
	"github.com/vigilrun/vigil/provider"
)

// Name is the driver's name, as sessions name their provider.
const Name = "codex"

// Defaults applied to an Options' zero fields.
const (
	DefaultPath           = "codex"
	DefaultAPIKeyEnv      = "OPENAI_API_KEY"
	DefaultCloseGrace     = 2 * time.Second
	DefaultRequestTimeout = 20 * time.Second
	DefaultStderrTail     = 4096
	// MaxLineBytes bounds one line of the app-server's output; a longer
	// one is dropped as malformed.
	MaxLineBytes = 64 << 20
)

// SessionEnv is the environment variable set on every Codex process to the
// vigil session it runs, so an operator can find the processes.
const SessionEnv = "VIGIL_SESSION"

// Options configures a Driver. Zero fields mean defaults.
type Options struct {
	// Path is the codex executable: a path, or a name looked up on PATH
	// (DefaultPath).
	Path string
	// Home is CODEX_HOME, where Codex reads config.toml and keeps the
	// threads' rollouts that thread/resume reads back; empty leaves it to
	// Codex (~/.codex). Every process of the driver shares it, so a new
	// process can resume what a dead one recorded.
	Home string
	// APIKey is the model provider's key. It reaches Codex only in its
	// environment, as APIKeyEnv, and is never logged.
	APIKey string
	// APIKeyEnv names the variable the key is passed in: the env_key of
	// the configured model provider (DefaultAPIKeyEnv).
	APIKeyEnv string
	// Config are configuration overrides, each passed as -c KEY=VALUE
	// (VALUE is TOML), after the driver's own.
	Config []string
	// Env holds extra environment entries ("KEY=value") on top of the
	// allowlisted part of vigil's own environment. The driver never logs
	// them.
	Env []string
	// PassEnv names more variables of vigil's environment Codex gets,
	// beyond the allowlist (see Driver.env); the configuration's
	// command_env.
	PassEnv []string
	// Model is the model to ask for when the session names none; empty
	// leaves it to Codex's configuration.
	Model string
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// CloseGrace is how long Close waits after closing stdin before it
	// sends SIGTERM to the process group, and again before SIGKILL
	// (DefaultCloseGrace).
	CloseGrace time.Duration
	// RequestTimeout bounds the wait for the answer to a JSON-RPC request
	// (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// IdleRelease ends a process that has printed nothing, had no turn in
	// progress on any of its threads, no command running and no request
	// waiting for this long, to save its memory; the next delivery starts
	// a new process, which resumes the thread. Live work defers it without
	// bound: nothing a process runs is ended by a release. Zero never
	// releases.
	IdleRelease time.Duration
	// Clock is the time source of Close, of request timeouts and of idle
	// release; nil means the real clock.
	Clock shell.Clock
}

// Driver runs `codex app-server` processes, one per agent. It implements
// provider.SessionDriver.
type Driver struct {
	opts  Options
	log   *slog.Logger
	stats counters

	mu     sync.Mutex
	procs  map[*process]struct{}
	closed bool

	// trace, when set (by tests), receives every line Codex prints.
	trace func(line []byte)
}

var _ provider.SessionDriver = (*Driver)(nil)

// New returns a driver.
func New(opts Options) *Driver {
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.APIKeyEnv == "" {
		opts.APIKeyEnv = DefaultAPIKeyEnv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CloseGrace <= 0 {
		opts.CloseGrace = DefaultCloseGrace
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	return &Driver{opts: opts, log: opts.Logger, procs: map[*process]struct{}{}}
}

// Name returns "codex".
func (d *Driver) Name() string { return Name }

// Start starts an app-server process for one agent and opens its thread:
// thread/resume of SessionStart.Resume, or thread/start. The process takes
// no turn until the first Deliver.
func (d *Driver) Start(ctx context.Context, p *provider.SessionStart) (provider.SessionProcess, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start codex: %w", err)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errors.New("start codex: driver closed")
	}
	path, err := exec.LookPath(d.opts.Path)
	if err != nil {
		return nil, fmt.Errorf("start codex: %w", err)
	}
	emit := p.Emit
	if emit == nil {
		emit = func(core.Input) {}
	}
	args := d.args()
	pr := newProcess(d, p, emit)
	if err := pr.start(path, args, d.env(p), p.Cwd); err != nil {
		return nil, fmt.Errorf("start codex: %w", err)
	}
	d.mu.Lock()
	d.procs[pr] = struct{}{}
	d.mu.Unlock()
	if err := pr.open(ctx, p); err != nil {
		pr.end(causeFailedOpen)
		<-pr.done
		return nil, fmt.Errorf("start codex: %w", err)
	}
	d.log.Info("codex: process started", "session", p.Session, "agent", p.Agent, "pid", pr.pid, "resume", p.Resume, "thread", pr.mainThread(), "args", args)
	pr.markOpened()
	return pr, nil
}

// args builds the command line. With an API key, Codex is told to keep it
// (and, by its default patterns *KEY*, *SECRET*, *TOKEN*, any other
// credential) out of the commands it runs: by default (measured on
// 0.169.0) a command's environment holds Codex's whole environment, key
// included. Options.Config comes after, and may say otherwise.
func (d *Driver) args() []string {
	args := []string{"app-server", "--listen", "stdio://"}
	if d.opts.APIKey != "" {
		args = append(args, "-c", "shell_environment_policy.ignore_default_excludes=false",
			"-c", fmt.Sprintf("shell_environment_policy.exclude=[%q]", d.opts.APIKeyEnv))
	}
	for _, c := range d.opts.Config {
		args = append(args, "-c", c)
	}
	return args
}

// env builds the process environment: an allowlist of vigil's own (see
// internal/cmdenv: PATH, HOME, the locale, the terminal, the user, plus
// proxy and certificate settings and Options.PassEnv), then the options'
// entries, CODEX_HOME, the API key under APIKeyEnv and the session marker.
// vigil's own settings (VIGIL_*) and other provider keys never reach
// Codex, whose commands would print them into the transcript; RUST_LOG is
// emptied so that Codex's stderr holds only what it reports on its own.
func (d *Driver) env(p *provider.SessionStart) []string {
	set := append([]string(nil), d.opts.Env...)
	if d.opts.Home != "" {
		set = append(set, "CODEX_HOME="+d.opts.Home)
	}
	if d.opts.APIKey != "" {
		set = append(set, d.opts.APIKeyEnv+"="+d.opts.APIKey)
	}
	set = append(set, "RUST_LOG=", SessionEnv+"="+p.Session)
	names := append([]string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "CODEX_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"}, d.opts.PassEnv...)
	return cmdenv.Build(os.Environ(), cmdenv.Spec{Names: names, Set: set})
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
			return fmt.Errorf("close codex driver: %w", ctx.Err())
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
	// MalformedLines counts output lines that were not JSON-RPC messages
	// (dropped, at warn).
	MalformedLines int64
	// UndecodableFrames counts notifications whose fields had unexpected
	// types (dropped, at warn).
	UndecodableFrames int64
	// IgnoredFrames counts notifications and items that map to nothing
	// (deltas, status, reasoning; at debug).
	IgnoredFrames int64
	// RefusedRequests counts requests of Codex (user input, elicitations)
	// answered with an error so that it does not wait.
	RefusedRequests int64
	// Wakes counts the turns the driver started on a thread because work
	// of its own ended (Codex starts none).
	Wakes int64
	// IdleReleases counts processes ended by IdleRelease.
	IdleReleases int64
}

type counters struct {
	malformed, undecodable, ignored, refused, wakes, idleReleases atomic.Int64
}

// Stats returns the driver's counters.
func (d *Driver) Stats() Stats {
	c := &d.stats
	return Stats{MalformedLines: c.malformed.Load(), UndecodableFrames: c.undecodable.Load(), IgnoredFrames: c.ignored.Load(),
		RefusedRequests: c.refused.Load(), Wakes: c.wakes.Load(), IdleReleases: c.idleReleases.Load()}
}
