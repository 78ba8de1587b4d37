package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
)

// cmdMCP serves vigil's MCP tools on stdin/stdout: on the store of the data
// directory in this process, or, with --server, as a thin bridge to the
// /mcp endpoint of a running 'vigil serve'.
func cmdMCP(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	serverURL := fs.String("server", "", "bridge to a running 'vigil serve' at this address (e.g. http://127.0.0.1:7777) instead of running agents in this process")
	token := fs.String("token", "", "with --server: the bearer token (default: $VIGIL_TOKEN, else <data>/token)")
	owner := fs.String("owner", "", "owner key of the calls that give none (default: $VIGIL_OWNER, else a random key per connection)")
	verbose := fs.Bool("v", false, "log at debug level (to stderr)")
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: vigil mcp [flags]

Serves vigil's MCP tools (spawn_agent, send_message, wait, ack, task_status,
task_output, stop_task, list_tasks, queue_list, queue_cancel, hold, resume)
over stdio. Agents run in this process on the store in the data directory,
and outlive it: the next 'vigil mcp' on the same directory takes them over.
With --server it forwards to a running 'vigil serve' instead.

  claude mcp add vigil -- vigil mcp --data ~/.local/share/vigil

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
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	// stdout carries the protocol: logs go to stderr only.
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	key := *owner
	if key == "" {
		key = e.getenv("VIGIL_OWNER")
	}
	transport := &mcp.IOTransport{Reader: os.Stdin, Writer: nopWriteCloser{e.stdout}}

	if *serverURL != "" {
		cf := clientFlags{server: *serverURL, token: *token, data: sf.data}
		c, err := cf.client(e)
		if err != nil {
			return err
		}
		url := c.base
		if !strings.HasSuffix(url, "/mcp") {
			url += "/mcp"
		}
		b := mcpserver.NewBridge(&mcpserver.BridgeOptions{URL: url, Token: c.token, Owner: key, Logger: logger})
		return b.Run(ctx, transport)
	}

	provs, err := pf.build(e, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if provs.note != "" {
		// The built-in demo scenario would answer every spawn with a script.
		return &exitError{code: 2, err: errors.New("no model provider for the agents: set ANTHROPIC_API_KEY or OPENAI_API_KEY in the server's environment (claude mcp add vigil -e ANTHROPIC_API_KEY=... -- vigil mcp), name one in ~/.config/vigil/config.yaml, or pass --provider script --script FILE for scripted agents")}
	}
	if _, ok := provs.providers[provs.name]; !ok {
		return &exitError{code: 2, err: fmt.Errorf("provider %q drives whole sessions in its own process; the agents vigil mcp spawns need a model provider (anthropic, openai, script, or one from the config): pass --provider", provs.name)}
	}
	st, dataDir, node, closeStore, err := sf.open(ctx, e, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, DefaultProvider: provs.name, DataDir: dataDir, Node: node, Logger: logger,
		// The sessions of MCP callers: those a 'vigil run' or 'vigil serve'
		// left open are theirs to take over.
		Adopt: func(s vigil.SessionSummary) bool { return s.Owner != "" },
	})
	if err != nil {
		return fmt.Errorf("open runtime: %w", err)
	}
	defer rt.Close()
	wd, _ := os.Getwd()
	opts := &mcpserver.Options{
		Logger: logger, Owner: key, Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel, Cwd: wd,
	}
	if c := provs.cfg; c != nil {
		opts.Permissions = vigil.Permissions{Mode: vigil.PermissionMode(c.PermissionMode), Allow: c.AllowFor(wd), Deny: c.Deny}
	}
	srv := mcpserver.New(rt, opts)
	logger.Info("serving MCP on stdio", "data", dataDir, "provider", provs.name)
	runErr := srv.Run(ctx, transport)
	srv.Close()
	rt.Close()
	closeStore()
	return runErr
}

// nopWriteCloser lets the transport close stdout without closing it.
type nopWriteCloser struct{ io.Writer }

// Close implements io.Closer.
func (nopWriteCloser) Close() error { return nil }
