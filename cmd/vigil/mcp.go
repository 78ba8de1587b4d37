package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
)

// cmdMCP serves vigil's MCP tools on stdin/stdout. By default it is a thin
// bridge to the background 'vigil serve' of the data directory, which it
// starts (detached) when none runs, so that agents keep working between
// the client's runs; --standalone runs the agents in this process instead,
// and --server bridges to a server named by its address.
func cmdMCP(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	standalone := fs.Bool("standalone", false, "run the agents in this process, on the store of the data directory, instead of in the background server (they stop while no client runs)")
	serverURL := fs.String("server", "", "bridge to a running 'vigil serve' at this address (e.g. http://127.0.0.1:7777) instead of the data directory's background server")
	token := fs.String("token", "", "with --server: the bearer token (default: $VIGIL_TOKEN, else <data>/token)")
	owner := fs.String("owner", "", "owner key of the calls that give none (default: $VIGIL_OWNER, else the key of the project the client runs in: its git root, else the working directory)")
	maxWait := fs.Duration("max-wait", 0, "the longest a vigil_wait may block: your client's tool-call timeout less a margin (default: learnt from the client's name; Codex 270s, Claude Code 1h, others 50s)")
	retention := fs.Duration("retention", 24*time.Hour, "close a session whose tasks have all ended and been acknowledged after this long (0: never); for the background server, when this starts it")
	verbose := fs.Bool("v", false, "log at debug level (to stderr)")
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: vigil mcp [flags]

Serves vigil's MCP tools (vigil_spawn, vigil_send, vigil_wait, vigil_ack,
vigil_status, vigil_output, vigil_stop, vigil_close, vigil_list, vigil_queue,
vigil_queue_cancel, vigil_hold, vigil_resume, vigil_approvals, vigil_approve)
over stdio. The agents run in the background 'vigil serve' of the data
directory, started when none runs (its address is in <data>/serve.json, its
log in <data>/daemon.log), so they keep working after the client exits.

  claude mcp add vigil -e ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY -- vigil mcp

flags:`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *standalone && *serverURL != "" {
		return &exitError{code: 2, err: errors.New("--standalone and --server exclude each other")}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	// stdout carries the protocol: logs go to stderr only.
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	key := *owner
	if key == "" {
		key = e.getenv("VIGIL_OWNER")
	}
	if key == "" {
		key = mcpserver.ProjectKey(wd)
	}
	ret := *retention
	if ret == 0 {
		ret = -1 // never
	}
	transport := &mcp.IOTransport{Reader: os.Stdin, Writer: nopWriteCloser{e.stdout}}
	bridge := func(url, tok string, ensure func(context.Context) (string, string, error)) error {
		if !strings.HasSuffix(url, "/mcp") {
			url = strings.TrimRight(url, "/") + "/mcp"
		}
		b := mcpserver.NewBridge(&mcpserver.BridgeOptions{URL: url, Token: tok, Owner: key, Logger: logger, MaxWait: *maxWait, Cwd: wd, Ensure: ensure})
		return b.Run(ctx, transport)
	}

	if *serverURL != "" {
		cf := clientFlags{server: *serverURL, token: *token, data: sf.data}
		c, err := cf.client(e)
		if err != nil {
			return err
		}
		return bridge(c.base, c.token, nil)
	}
	dir, err := sf.dataDir(e)
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !*standalone {
		d, err := mcpDaemon(ctx, e, fs, &pf, &sf, dir, ret, logger)
		if err != nil {
			return err
		}
		url, tok, err := d.ensure(ctx)
		if err != nil {
			return err
		}
		logger.Info("bridging to vigil's background server", "url", url, "owner_key", key)
		return bridge(url, tok, d.ensure)
	}

	provs, err := mcpProviders(e, &pf, logger)
	if err != nil {
		return err
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
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, DefaultProvider: provs.name, DataDir: dataDir, Node: node, Logger: logger,
		TracerProvider: tr.tracerProvider(), TraceContent: tr.content,
		// The sessions of MCP callers: those a 'vigil run' or 'vigil serve'
		// left open are theirs to take over.
		Adopt: func(s vigil.SessionSummary) bool { return s.Owner != "" },
	})
	if err != nil {
		return fmt.Errorf("open runtime: %w", err)
	}
	defer rt.Close()
	opts := &mcpserver.Options{
		Logger: logger, Owner: key, Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel, Cwd: wd, MaxWait: *maxWait, Retention: ret,
	}
	if c := provs.cfg; c != nil {
		opts.Permissions = vigil.Permissions{Mode: vigil.PermissionMode(c.PermissionMode), Allow: c.Allow, Deny: c.Deny}
		opts.ProjectRules = c.Rules.For
	}
	srv := mcpserver.New(rt, opts)
	logger.Info("serving MCP on stdio", "data", dataDir, "provider", provs.name, "owner_key", key)
	runErr := srv.Run(ctx, transport)
	srv.Close()
	rt.Close()
	closeStore()
	return runErr
}

// mcpProviders builds the providers of the agents vigil mcp spawns: a
// model provider, never the scripted demo, whose error names the fix for
// each client.
func mcpProviders(e *env, pf *providerFlags, logger *slog.Logger) (*providerSet, error) {
	provs, err := pf.build(e, logger)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if provs.note != "" {
		// The built-in demo scenario would answer every spawn with a script.
		return nil, &exitError{code: 2, err: errors.New(noProviderHelp)}
	}
	if _, ok := provs.providers[provs.name]; !ok {
		return nil, &exitError{code: 2, err: fmt.Errorf("provider %q drives whole sessions in its own process; the agents vigil mcp spawns need a model provider (anthropic, openai, script, or one from the config): pass --provider", provs.name)}
	}
	return provs, nil
}

// noProviderHelp says how each client gives vigil mcp a model provider.
const noProviderHelp = `vigil mcp: no model provider for the agents: ANTHROPIC_API_KEY and OPENAI_API_KEY are not set in the MCP server's environment. Give it one:
  Claude Code:  claude mcp add vigil -e ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY -- vigil mcp
  Codex:        Codex passes an MCP server only the variables it lists: add  env_vars = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]  under [mcp_servers.vigil] in ~/.codex/config.toml
  other clients: set ANTHROPIC_API_KEY (or OPENAI_API_KEY) in the server's "env" of the client's MCP configuration
or name a provider in ~/.config/vigil/config.yaml, or pass --provider script --script FILE for scripted agents.`

// mcpDaemon returns the background server of the data directory, as vigil
// mcp starts it when none runs: 'vigil serve' on a free loopback port with
// this command's provider, store and sandbox flags. Its providers are
// checked here first, so that a missing key is told to this client rather
// than buried in the server's log; when a server runs already, it is used
// as it is.
func mcpDaemon(ctx context.Context, e *env, fs *flag.FlagSet, pf *providerFlags, sf *storeFlags, dir string, retention time.Duration, logger *slog.Logger) (*daemon, error) {
	// Its stdout is a log file: the token stays in <data>/token only.
	args := []string{"--addr", "127.0.0.1:0", "--data", dir, "--mcp-retention", retention.String(), "--show-token=false"}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "provider", "model", "sandbox", "db":
			args = append(args, "--"+f.Name, f.Value.String())
		case "network", "memory":
			args = append(args, "--"+f.Name+"="+f.Value.String())
		case "script":
			abs, err := filepath.Abs(f.Value.String())
			if err != nil {
				bad = err
			}
			args = append(args, "--script", abs)
		}
	})
	if bad != nil {
		return nil, fmt.Errorf("script: %w", bad)
	}
	d := &daemon{dir: dir, args: args, log: filepath.Join(dir, "daemon.log"), wait: 30 * time.Second,
		started: func(url string, pid int) {
			logger.Info("started vigil's background server", "url", url, "pid", pid, "log", filepath.Join(dir, "daemon.log"))
		}}
	if rec, err := readServeRecord(dir); err == nil && healthy(ctx, rec.URL) {
		return d, nil
	}
	if _, err := mcpProviders(e, pf, logger); err != nil {
		return nil, err
	}
	return d, nil
}

// nopWriteCloser lets the transport close stdout without closing it.
type nopWriteCloser struct{ io.Writer }

// Close implements io.Closer.
func (nopWriteCloser) Close() error { return nil }
