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
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/server"
	"github.com/vigilrun/vigil/store/postgres"
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
	advertise := fs.String("advertise", "", "the base URL other nodes reach this node's API at, e.g. http://10.0.0.2:7777; it makes the server a\ncluster node, as a PostgreSQL --db does (default there: http://<the listen address>, which must then not be 0.0.0.0 or [::])")
	tokenFile := fs.String("token-file", "", "read the bearer token from this file (mode 0600): the cluster secret every node accepts\n(default: $VIGIL_TOKEN, else <data>/token, made on first start)")
	leaseTTL := fs.Duration("lease-ttl", 0, "how long a session lease lasts without renewal (default 30s)")
	verbose := fs.Bool("v", false, "log at debug level")
	var pf providerFlags
	pf.register(fs)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: vigil serve [flags]

Serves the HTTP API, live event streams, /metrics, /healthz and the web UI.
The bearer token is --token-file's, else $VIGIL_TOKEN, else the one kept in
<data>/token (mode 0600), made on first start.

Several nodes: start each on the same PostgreSQL database (--db postgres://...),
with one token (--token-file or $VIGIL_TOKEN, the same on every node) and the
address the others reach it at (--advertise; --allow-remote to listen beyond
loopback). Any node then serves any session and any MCP session; 'vigil nodes'
lists them.

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
	if *advertise != "" {
		if _, err := parseAdvertise(*advertise); err != nil {
			return &exitError{code: 2, err: err}
		}
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
	tok, err := serveToken(e, *tokenFile, dataDir)
	if err != nil {
		return err
	}
	token := tok.token
	allowed := strings.FieldsFunc(*allowHost, func(r rune) bool { return r == ',' || r == ' ' })
	// A node on PostgreSQL is one of a cluster: the others send it calls
	// and MCP requests at its advertised address.
	var cluster *vigil.ClusterOptions
	if _, pg := st.(*postgres.Store); pg || *advertise != "" {
		adv, err := advertiseURL(*advertise, *addr, ln.Addr())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		cluster = &vigil.ClusterOptions{Advertise: adv.String(), Token: token}
		// The others' calls name this node as they reach it.
		allowed = append(allowed, adv.Host)
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
	metrics := server.NewMetrics()
	rt, err := vigil.Open(ctx, vigil.Options{
		Core: provs.cfg.Core(), CommandEnv: provs.cfg.CommandEnv, Sandbox: sf.sandboxOptions(provs.cfg), Store: st, Providers: provs.providers, Drivers: provs.drivers, DefaultProvider: provs.name, DataDir: dataDir, Node: node,
		Logger: logger, Observer: metrics, LeaseTTL: *leaseTTL, Cluster: cluster,
		TracerProvider: tr.tracerProvider(), TraceContent: tr.content,
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
	mcpOpts := &mcpserver.Options{
		Logger: logger, Provider: provs.name, Model: provs.model, SubagentModel: provs.subagentModel, Permissions: defaults.Permissions,
		ProjectRules: defaults.ProjectRules, Retention: ret,
	}
	srvOpts := server.Options{Token: token, Logger: logger, Metrics: metrics, ShutdownTimeout: *shutdown, Defaults: defaults, AllowedHosts: allowed}
	if cluster != nil {
		// MCP sessions live in this node's memory: their ids name it, so
		// that any node sends their requests here.
		mcpOpts.SessionTag = server.NodeTag(rt.NodeID())
		srvOpts.Peer = rt.PeerHandler()
	}
	mcpSrv := mcpserver.New(rt, mcpOpts)
	// At shutdown the MCP waits in flight end first, so that they do not
	// hold the graceful shutdown for their whole timeout.
	stopMCP := context.AfterFunc(ctx, func() { mcpSrv.Close() })
	defer stopMCP()
	defer mcpSrv.Close()
	srvOpts.MCP = mcpSrv.Handler()
	srv := server.New(rt, srvOpts)

	base := "http://" + ln.Addr().String()
	// Where this server listens, for 'vigil mcp' to find it.
	unrecord, err := writeServeRecord(dataDir, base)
	if err != nil {
		return err
	}
	defer unrecord()
	fmt.Fprintf(e.stdout, "vigil serving on %s (API %s/api/, MCP %s/mcp, metrics %s/metrics)\n", base, base, base, base)
	switch {
	case tok.created && *showToken:
		fmt.Fprintf(e.stdout, "new API token (shown this once; kept in %s):\n  %s\n", tok.where, token)
		fmt.Fprintf(e.stdout, "open the UI: %s/#token=%s\n", base, token)
	case tok.given:
		fmt.Fprintf(e.stdout, "UI: %s/ (the token is the one of %s)\n", base, tok.where)
	default:
		fmt.Fprintf(e.stdout, "UI: %s/ (the token is in %s)\n", base, tok.where)
	}
	if cluster != nil {
		fmt.Fprintf(e.stdout, "cluster node %s, advertised at %s (vigil nodes lists the others)\n", rt.NodeID(), cluster.Advertise)
	}
	if provs.note != "" {
		fmt.Fprintln(e.stdout, provs.note)
	}
	if sf.memory {
		fmt.Fprintln(e.stdout, "sessions are kept in memory only: they end with this process")
	}
	if cluster != nil {
		logger.Info("serving", "addr", ln.Addr().String(), "data", dataDir, "provider", provs.name, "node", rt.NodeID(), "advertise", cluster.Advertise)
	} else {
		logger.Info("serving", "addr", ln.Addr().String(), "data", dataDir, "provider", provs.name)
	}

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

// minTokenLen is the shortest token --token-file or $VIGIL_TOKEN may give:
// it is all that guards the API, which runs commands on the machine.
const minTokenLen = 16

// serveTokenSource is the server's bearer token and where it came from.
type serveTokenSource struct {
	token string
	// where names its source for people: the file, or $VIGIL_TOKEN.
	where string
	// given: from --token-file or $VIGIL_TOKEN; created: made now in
	// <data>/token.
	given, created bool
}

// serveToken returns the bearer token of 'vigil serve': the one of
// tokenFile, else $VIGIL_TOKEN, else <data>/token (made on first start).
// A token file must be readable by its owner only, like <data>/token.
func serveToken(e *env, tokenFile, dataDir string) (serveTokenSource, error) {
	if tokenFile != "" {
		tok, err := readTokenFile(tokenFile)
		if err != nil {
			return serveTokenSource{}, err
		}
		return serveTokenSource{token: tok, where: tokenFile, given: true}, nil
	}
	if tok := strings.TrimSpace(e.getenv("VIGIL_TOKEN")); tok != "" {
		if err := checkGivenToken(tok, "$VIGIL_TOKEN"); err != nil {
			return serveTokenSource{}, err
		}
		return serveTokenSource{token: tok, where: "$VIGIL_TOKEN", given: true}, nil
	}
	tok, created, path, err := loadOrCreateToken(dataDir)
	if err != nil {
		return serveTokenSource{}, err
	}
	return serveTokenSource{token: tok, where: path, created: created}, nil
}

// readTokenFile reads the token of --token-file.
func readTokenFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", &exitError{code: 2, err: fmt.Errorf("--token-file %s does not exist; make one (the same file on every node), e.g.: umask 077; head -c 32 /dev/urandom | base64 > %s", path, path)}
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", &exitError{code: 2, err: fmt.Errorf("--token-file %s is not a regular file", path)}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s is readable by others (mode %v); run: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if err := checkGivenToken(tok, "token file "+path); err != nil {
		return "", err
	}
	return tok, nil
}

// checkGivenToken refuses a token too short to guard the API, or one no
// Authorization header can carry.
func checkGivenToken(tok, where string) error {
	if len(tok) < minTokenLen {
		return &exitError{code: 2, err: fmt.Errorf("the token of %s is %d characters; a token guards the API and must be at least %d", where, len(tok), minTokenLen)}
	}
	for _, r := range tok {
		if r <= ' ' || r > '~' {
			return &exitError{code: 2, err: fmt.Errorf("the token of %s holds a space, a control or a non-ASCII character; use printable ASCII (base64, hex)", where)}
		}
	}
	return nil
}

// parseAdvertise checks an --advertise URL: http or https, a host and a
// port or a default one, no path, query or credentials.
func parseAdvertise(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("--advertise %q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("--advertise %q: want an http:// or https:// URL, e.g. http://10.0.0.2:7777", s)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("--advertise %q: no host", s)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("--advertise %q: want the base URL only (scheme, host and port), e.g. http://10.0.0.2:7777", s)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("--advertise %q: %s is no address another node can reach; give this machine's", s, u.Hostname())
	}
	return u, nil
}

// advertiseURL is the address a cluster node gives the others: --advertise
// when set, else http://<the address it listens on>, unless that is every
// interface (0.0.0.0, [::]), which names no machine.
func advertiseURL(flagValue, addr string, ln net.Addr) (*url.URL, error) {
	if flagValue != "" {
		return parseAdvertise(flagValue)
	}
	if ta, ok := ln.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return nil, fmt.Errorf("--addr %s listens on every interface: give --advertise, the URL other nodes reach this one at (e.g. --advertise http://10.0.0.2:%d); a node on PostgreSQL is one of a cluster", addr, ta.Port)
	}
	return parseAdvertise("http://" + ln.String())
}
