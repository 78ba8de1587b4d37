package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/text"
	"github.com/vigilrun/vigil/internal/tui"
	"github.com/vigilrun/vigil/server"
)

// cmdChat opens the terminal client: on a session run in this process
// (the store, providers and defaults of 'vigil run'), or with --server on
// a running 'vigil serve'. Either way the client speaks the HTTP API: in
// this process it is served on a loopback port with a token made for this
// run, so that a local session and a remote one are shown by one client.
func cmdChat(ctx context.Context, e *env, args []string) error {
	return runChat(ctx, e, "chat", args, "")
}

// cmdAttach opens the terminal client on an existing session of a
// running server.
func cmdAttach(ctx context.Context, e *env, args []string) error {
	return runChat(ctx, e, "attach", args, "attach")
}

func runChat(ctx context.Context, e *env, name string, args []string, attach string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var cf clientFlags
	fs.StringVar(&cf.server, "server", "", "attach to a running 'vigil serve' at this address (default for attach: $VIGIL_SERVER, else "+defaultServer+"; for chat: run the session in this process)")
	fs.StringVar(&cf.token, "token", "", "the server's bearer token (default: $VIGIL_TOKEN, else the token file in the data directory)")
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	mode := fs.String("permission-mode", "ask", "permission mode of a new session: ask (a person is at the keyboard: requests are answered inline), accept-edits, auto or bypass (unset: the config file's permission_mode, or the server's, else ask)")
	fs.StringVar(mode, "mode", "ask", "short for --permission-mode")
	cwd := fs.String("cwd", "", "working directory of a new session's tools (default: the current directory)")
	resume := fs.String("resume", "", "open an earlier session of the store (in this process: take it over) instead of starting a new one")
	var allow, deny stringList
	fs.Var(&allow, "allow", "allow rule of a new session, e.g. 'Bash(go test *)' (repeatable)")
	fs.Var(&deny, "deny", "deny rule of a new session (repeatable)")
	usage := `chat [--server URL] [--provider P] [--permission-mode M] [--resume SESSION] ["first prompt"]`
	if attach != "" {
		usage = "attach [--server URL] SESSION"
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: vigil %s\n\nThe terminal client: the conversation with the model's text as it streams, and beside it\nthe agents, what each waits on, tasks, notifications and inboxes. /help inside lists the keys.\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	opts := tui.Options{Session: *resume}
	switch {
	case attach != "" && len(pos) != 1:
		fs.Usage()
		return &exitError{code: 2, err: errors.New("name the session to attach to")}
	case attach != "":
		opts.Session = pos[0]
	case len(pos) > 1:
		fs.Usage()
		return &exitError{code: 2, err: errors.New("give at most one prompt (quote it)")}
	case len(pos) == 1:
		opts.Prompt = pos[0]
	}
	dir := *cwd
	if dir == "" {
		dir, _ = os.Getwd()
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	modeSet := set["permission-mode"] || set["mode"]
	newSession := map[string]any{}
	if modeSet || len(allow)+len(deny) > 0 {
		newSession["permissions"] = vigil.Permissions{Mode: vigil.PermissionMode(*mode), Allow: allow, Deny: deny}
	}
	if pf.model != "" {
		newSession["model"] = pf.model
	}
	if pf.name != "" {
		newSession["provider"] = pf.name
	}
	if opts.Prompt != "" {
		newSession["title"] = text.FirstLine(opts.Prompt, 60)
	}

	if cf.server != "" || attach != "" {
		cf.data = sf.data
		c, err := cf.client(e)
		if err != nil {
			return err
		}
		if isLocal(c.base) && dir != "" {
			newSession["cwd"] = dir
		}
		opts.API, opts.Where, opts.New = newTUIAPI(c), strings.TrimPrefix(c.base, "http://"), newSession
		return tui.Run(ctx, opts)
	}

	// In this process: the runtime, served on a loopback port.
	st, dataDir, node, closeStore, err := sf.open(ctx, e, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer closeStore()
	// The terminal is the client's: logs go to a file beside the store.
	logf, err := os.OpenFile(filepath.Join(dataDir, "chat.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the log: %w", err)
	}
	defer logf.Close()
	logger := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	provs, err := pf.build(e, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if _, set := newSession["provider"]; !set {
		newSession["provider"] = provs.name
	}
	// As with 'vigil run' and 'vigil serve': the config file's permissions
	// apply unless a flag says otherwise (a server applies its own when
	// the flags say nothing).
	if c := provs.cfg; c != nil {
		if !modeSet && c.PermissionMode != "" {
			*mode = c.PermissionMode
		}
		if !set["allow"] {
			allow = c.AllowFor(dir)
		}
		if !set["deny"] {
			deny = c.Deny
		}
	}
	newSession["permissions"] = vigil.Permissions{Mode: vigil.PermissionMode(*mode), Allow: allow, Deny: deny}
	newSession["cwd"] = dir
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, Drivers: provs.drivers, DefaultProvider: provs.name, DataDir: dataDir, Node: node, Logger: logger,
		// Like 'vigil run': this process takes over only the session it
		// is asked to open; others are left to their owners or to serve.
		Adopt: func(s vigil.SessionSummary) bool { return *resume != "" && string(s.ID) == *resume },
	})
	if err != nil {
		return fmt.Errorf("open runtime: %w", err)
	}
	defer rt.Close()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("make a token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	ln, err := server.Listen("127.0.0.1:0", false)
	if err != nil {
		return err
	}
	srv := server.New(rt, server.Options{Token: token, Logger: logger, Defaults: server.SessionDefaults{Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel}})
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			logger.Warn("the in-process server stopped with an error", "err", err)
		}
	}()
	base := "http://" + ln.Addr().String()
	c := &apiClient{base: base, token: token, hc: &http.Client{}, retryFor: maxRetryWait, sleep: sleepRetry}
	opts.API, opts.Where, opts.New = newTUIAPI(c), "in-process", newSession
	return tui.Run(ctx, opts)
}

// tuiAPI gives the terminal client the CLI's HTTP client.
type tuiAPI struct{ c *apiClient }

func newTUIAPI(c *apiClient) tuiAPI {
	c.stderr = nil // the terminal is the client's: it says itself what it waits on
	return tuiAPI{c: c}
}

// Do implements tui.API.
func (a tuiAPI) Do(ctx context.Context, method, path string, body any) ([]byte, error) {
	b, _, err := a.c.do(ctx, method, path, body)
	return b, err
}

// Stream implements tui.API.
func (a tuiAPI) Stream(ctx context.Context, path string, after int64, fn func(data []byte) bool) error {
	return a.c.stream(ctx, path, after, func(_ vigil.Event, raw string) bool { return fn([]byte(raw)) })
}
