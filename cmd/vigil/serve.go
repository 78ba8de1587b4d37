package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/server"
)

// cmdServe runs the runtime with the HTTP API, event streams, metrics and
// the web UI until SIGINT or SIGTERM, then shuts down gracefully: it stops
// accepting, lets requests in flight finish (bounded), closes the runtime
// after the step in progress and closes the store.
func cmdServe(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	addr := fs.String("addr", "127.0.0.1:7777", "listen address (host:port)")
	allowHost := fs.String("allow-host", "", "comma-separated host names the API also answers to (a proxy's name; with --allow-remote, the machine's); * for any")
	allowRemote := fs.Bool("allow-remote", false, "allow a non-loopback --addr (the bearer token is then all that guards the machine; put TLS in front)")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "how long requests in flight may take to finish at shutdown")
	showToken := fs.Bool("show-token", true, "print a newly made token on stdout (vigil mcp's background server, whose stdout is a log, does not)")
	retention := fs.Duration("mcp-retention", 24*time.Hour, "close an MCP caller's session whose tasks have all ended and been acknowledged after this long (0: never)")
	verbose := fs.Bool("v", false, "log at debug level")
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: vigil serve [flags]\n\nServes the HTTP API, live event streams, /metrics, /healthz and the web UI.\nThe bearer token is made on first start and kept in <data>/token (mode 0600).\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if !*allowRemote {
		local, err := server.IsLoopback(*addr)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if !local {
			return &exitError{code: 2, err: fmt.Errorf("refusing to listen on %s: it is reachable from other machines, and the API runs commands on this one; use a loopback address (127.0.0.1:PORT) or pass --allow-remote", *addr)}
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	provs, err := pf.build(e, logger)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	// Listen first: a busy port fails before sessions are taken over.
	ln, err := server.Listen(*addr, *allowRemote)
	if err != nil {
		return err
	}
	defer ln.Close()
	st, dataDir, node, closeStore, err := sf.open(ctx, e, logger)
	if err != nil {
		return err
	}
	defer closeStore()
	token, created, tokenPath, err := loadOrCreateToken(dataDir)
	if err != nil {
		return err
	}
	metrics := server.NewMetrics()
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, Drivers: provs.drivers, DefaultProvider: provs.name, DataDir: dataDir, Node: node,
		Logger: logger, Observer: metrics,
	})
	if err != nil {
		return fmt.Errorf("open runtime: %w", err)
	}
	defer rt.Close()
	defaults := server.SessionDefaults{Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel}
	if c := provs.cfg; c != nil {
		defaults.Permissions = vigil.Permissions{Mode: vigil.PermissionMode(c.PermissionMode), Allow: c.Allow, Deny: c.Deny}
		// Rules a person saved for a project apply to its sessions; the
		// server's config keeps them (the CLI's approve --always --save).
		var mu sync.Mutex
		defaults.ProjectRules = func(dir string) []string {
			mu.Lock()
			defer mu.Unlock()
			return c.Rules.For(dir)
		}
		defaults.SaveRule = func(dir, rule string) error {
			mu.Lock()
			defer mu.Unlock()
			return c.SaveRule(dir, rule)
		}
	}
	ret := *retention
	if ret == 0 {
		ret = -1 // never
	}
	mcpSrv := mcpserver.New(rt, &mcpserver.Options{
		Logger: logger, Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel, Permissions: defaults.Permissions,
		ProjectRules: defaults.ProjectRules, Retention: ret,
	})
	// At shutdown the MCP waits in flight end first, so that they do not
	// hold the graceful shutdown for their whole timeout.
	stopMCP := context.AfterFunc(ctx, func() { mcpSrv.Close() })
	defer stopMCP()
	defer mcpSrv.Close()
	srv := server.New(rt, server.Options{Token: token, Logger: logger, Metrics: metrics, ShutdownTimeout: *shutdown, Defaults: defaults, MCP: mcpSrv.Handler(),
		AllowedHosts: strings.FieldsFunc(*allowHost, func(r rune) bool { return r == ',' || r == ' ' })})

	base := "http://" + ln.Addr().String()
	// Where this server listens, for 'vigil mcp' to find it.
	unrecord, err := writeServeRecord(dataDir, base)
	if err != nil {
		return err
	}
	defer unrecord()
	fmt.Fprintf(e.stdout, "vigil serving on %s (API %s/api/, MCP %s/mcp, metrics %s/metrics)\n", base, base, base, base)
	if created && *showToken {
		fmt.Fprintf(e.stdout, "new API token (shown this once; kept in %s):\n  %s\n", tokenPath, token)
		fmt.Fprintf(e.stdout, "open the UI: %s/#token=%s\n", base, token)
	} else {
		fmt.Fprintf(e.stdout, "UI: %s/ (the token is in %s)\n", base, tokenPath)
	}
	if provs.note != "" {
		fmt.Fprintln(e.stdout, provs.note)
	}
	if sf.memory {
		fmt.Fprintln(e.stdout, "sessions are kept in memory only: they end with this process")
	}
	logger.Info("serving", "addr", ln.Addr().String(), "data", dataDir, "provider", provs.name)

	serveErr := srv.Serve(ctx, ln)
	logger.Info("shutting down: finishing the step in progress")
	rt.Close()
	closeStore()
	if serveErr != nil {
		return serveErr
	}
	logger.Info("stopped")
	return nil
}

// loadOrCreateToken returns the token kept in dir/token, making one on
// first start (32 random bytes, base64url, mode 0600 in a 0700 directory).
// created reports whether it was made now.
func loadOrCreateToken(dir string) (token string, created bool, path string, err error) {
	path = filepath.Join(dir, "token")
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			token = strings.TrimSpace(string(b))
			if token == "" {
				return "", false, path, fmt.Errorf("token file %s is empty; delete it and a new token is made", path)
			}
			if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
				return "", false, path, fmt.Errorf("token file %s is readable by others (mode %v); run: chmod 600 %s", path, fi.Mode().Perm(), path)
			}
			return token, false, path, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", false, path, fmt.Errorf("read token: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", false, path, fmt.Errorf("token directory: %w", err)
		}
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", false, path, fmt.Errorf("make token: %w", err)
		}
		token = base64.RawURLEncoding.EncodeToString(raw)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // another process made it first: use theirs
		}
		if err != nil {
			return "", false, path, fmt.Errorf("write token: %w", err)
		}
		_, werr := f.WriteString(token + "\n")
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return "", false, path, fmt.Errorf("write token: %w", err)
		}
		return token, true, path, nil
	}
	return "", false, path, fmt.Errorf("token file %s: created and removed concurrently", path)
}
