package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/text"
	"github.com/vigilrun/vigil/server"
)

// The client commands talk to a running 'vigil serve'. The address comes
// from --server, else $VIGIL_SERVER, else 127.0.0.1:7777; the token from
// --token, else $VIGIL_TOKEN, else <data>/token.

const defaultServer = "127.0.0.1:7777"

// clientFlags are the flags of every client command.
type clientFlags struct {
	server string
	token  string
	data   string
	json   bool
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", "", "server address (default: $VIGIL_SERVER, else "+defaultServer+")")
	fs.StringVar(&f.token, "token", "", "bearer token (default: $VIGIL_TOKEN, else the token file in the data directory)")
	fs.StringVar(&f.data, "data", "", "data directory holding the token file (default: $VIGIL_DATA, else the user's data directory)/vigil")
	fs.BoolVar(&f.json, "json", false, "print the server's JSON")
}

// apiClient calls the server's API.
type apiClient struct {
	base  string
	token string
	hc    *http.Client
	// stderr is told, once, that the client waits to retry.
	stderr io.Writer
	// retryFor bounds the waits of retries after 503 with Retry-After
	// (maxRetryWait), summed over one request; sleep waits one of them.
	retryFor time.Duration
	sleep    func(ctx context.Context, d time.Duration) error
	told     bool
}

// maxRetryWait bounds how long a client command waits, in all, for a
// server that answers 503 with Retry-After (a session between nodes while
// one fails over) before it gives up with the server's answer.
const maxRetryWait = 30 * time.Second

// sleepRetry waits d, or until ctx ends.
func sleepRetry(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (f *clientFlags) client(e *env) (*apiClient, error) {
	addr := f.server
	if addr == "" {
		addr = e.getenv("VIGIL_SERVER")
	}
	if addr == "" {
		addr = defaultServer
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, &exitError{code: 2, err: fmt.Errorf("bad server address %q", addr)}
	}
	tok := f.token
	if tok == "" {
		tok = e.getenv("VIGIL_TOKEN")
	}
	if tok == "" {
		sf := storeFlags{data: f.data}
		dir, err := sf.dataDir(e)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "token")
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &exitError{code: 2, err: fmt.Errorf("no token: pass --token, set VIGIL_TOKEN, or run where 'vigil serve' keeps its token file (%v)", err)}
		}
		tok = strings.TrimSpace(string(b))
	}
	sleep := e.sleep
	if sleep == nil {
		sleep = sleepRetry
	}
	return &apiClient{base: strings.TrimRight(u.String(), "/"), token: tok, hc: &http.Client{}, stderr: e.stderr, retryFor: maxRetryWait, sleep: sleep}, nil
}

// apiError is an error answer of the server.
type apiError struct {
	status  int
	code    string
	message string
}

// Error implements error.
func (e *apiError) Error() string { return e.message }

// do sends a request and returns the body of a 2xx answer; any other
// answer is an *apiError with the server's message.
func (c *apiClient) do(ctx context.Context, method, path string, body any) ([]byte, int, error) {
	var enc []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, fmt.Errorf("encode request: %w", err)
		}
		enc = b
	}
	resp, err := c.send(ctx, func() (*http.Request, error) {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(enc)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return req, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		return nil, resp.StatusCode, answerError(resp.StatusCode, b)
	}
	return b, resp.StatusCode, nil
}

// send sends the request newReq makes, with the token. An answer 503
// with Retry-After (a session between nodes: nothing of the request was
// kept) is retried after the wait it asks for, as long as the waits add
// up to no more than retryFor; stderr is told once. The last answer is
// returned, whatever its status.
func (c *apiClient) send(ctx context.Context, newReq func() (*http.Request, error)) (*http.Response, error) {
	var waited time.Duration
	for {
		req, err := newReq()
		if err != nil {
			return nil, fmt.Errorf("request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("cannot reach the vigil server at %s (is 'vigil serve' running? set --server or VIGIL_SERVER): %w", c.base, err)
		}
		wait, ok := retryAfter(resp)
		if !ok || waited+wait > c.retryFor {
			return resp, nil
		}
		// Read the answer to reuse the connection; it is not needed.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if !c.told && c.stderr != nil {
			c.told = true
			fmt.Fprintf(c.stderr, "vigil: the server is busy moving the session between nodes (503, Retry-After %s); retrying for up to %s…\n", wait, c.retryFor)
		}
		if err := c.sleep(ctx, wait); err != nil {
			return nil, err
		}
		waited += wait
	}
}

// retryAfter reads the wait of a 503 answer's Retry-After header, in
// seconds; an HTTP date or no header is no retry.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	secs, err := strconv.Atoi(v)
	if v == "" || err != nil || secs < 0 {
		return 0, false
	}
	return time.Duration(max(secs, 1)) * time.Second, true
}

func answerError(status int, b []byte) error {
	var eb server.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		return &apiError{status: status, code: eb.Error.Code, message: eb.Error.Message}
	}
	return &apiError{status: status, code: "http", message: fmt.Sprintf("server answered %d: %s", status, text.OneLine(string(b), 200))}
}

// get decodes a GET answer into out, or prints it raw with --json.
func (c *apiClient) get(ctx context.Context, path string, out any) ([]byte, error) {
	b, _, err := c.do(ctx, "GET", path, nil)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("decode answer: %w", err)
		}
	}
	return b, nil
}

// parseArgs parses flags anywhere among the arguments ("send S text
// --priority now"); "--" ends the flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, &exitError{code: 2}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// answer decodes the server's answer b as a T. With --json it prints b
// as it came instead, and done is true: the command has nothing more to
// say; done is true too when b cannot be decoded, with the error.
func answer[T any](e *env, cf *clientFlags, b []byte) (v T, done bool, err error) {
	if cf.json {
		return v, true, printRaw(e, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, true, fmt.Errorf("decode answer: %w", err)
	}
	return v, false, nil
}

// clientCommand sets up a client command: its flags, usage and arguments.
func clientCommand(e *env, name, usage string, nargs int, args []string, extra func(fs *flag.FlagSet)) (*clientFlags, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cf := &clientFlags{}
	cf.register(fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: vigil %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if nargs >= 0 && len(pos) != nargs {
		fs.Usage()
		return nil, nil, &exitError{code: 2, err: fmt.Errorf("want %d argument(s), got %d", nargs, len(pos))}
	}
	return cf, pos, nil
}

func sessionPath(id string, parts ...string) string {
	p := "/api/sessions/" + url.PathEscape(id)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

func printRaw(e *env, b []byte) error {
	_, err := e.stdout.Write(b)
	return err
}

func cmdSessions(ctx context.Context, e *env, args []string) error {
	var open, needsYou bool
	cf, _, err := clientCommand(e, "sessions", "sessions [--open] [--needs-you]", 0, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&open, "open", false, "only sessions that are not closed")
		fs.BoolVar(&needsYou, "needs-you", false, "only sessions where a person must act: a permission request, a failed run, a spent budget")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	q := url.Values{}
	if open {
		q.Set("open", "true")
	}
	if needsYou {
		q.Set("needs_you", "1")
	}
	var list server.SessionList
	b, err := c.get(ctx, queryPath("/api/sessions", q), &list)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, b)
	}
	if needsYou {
		// A server that predates the filter answers every session.
		list.Sessions = slices.DeleteFunc(list.Sessions, func(s vigil.SessionSummary) bool { return len(s.NeedsYou) == 0 })
	}
	if len(list.Sessions) == 0 {
		if needsYou {
			fmt.Fprintln(e.stdout, "no session needs you")
			return nil
		}
		fmt.Fprintln(e.stdout, "no sessions")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATE\tNEEDS YOU\tUPDATED\tEVENTS\tTOKENS\tTITLE")
	for _, s := range list.Sessions {
		state := "open"
		if s.Closed {
			state = "closed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.ID, state, needsYouCell(s.NeedsYou), ago(s.Updated), s.LastSeq, s.InputTokens+s.OutputTokens, text.OneLine(s.Title, 60))
	}
	return tw.Flush()
}

func cmdShow(ctx context.Context, e *env, args []string) error {
	return sessionView(ctx, e, "show", args, nil, func(d *vigil.SessionDetail) error {
		s := d.Session
		state := "open"
		if s.Closed {
			state = "closed: " + s.CloseReason
		}
		fmt.Fprintf(e.stdout, "session %s %q (%s; provider %s; mode %s; %d events; created %s)\n", s.ID, s.Title, state, s.Provider, s.Permissions.Mode, d.Seq, ago(s.Created))
		if d.Hold != nil {
			fmt.Fprintf(e.stdout, "user prompts HELD by %s since %s%s\n", orDefault(d.Hold.By, "the user"), ago(d.Hold.Since), reasonSuffix(d.Hold.Reason))
		}
		if d.Quiescent {
			fmt.Fprintln(e.stdout, "quiescent: no run in progress, no live task, every inbox empty")
		}
		fmt.Fprintln(e.stdout)
		// A tabwriter aligns the columns whatever the names' lengths.
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tID\tSTATE\tRUNS\tINBOX\tLAST ACTIVE\tTASK\tDOING")
		for _, a := range d.Agents {
			// RUNS counts the run in progress, which DOING names.
			runs := a.Runs
			if a.Run != nil {
				runs++
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", strings.Repeat("  ", a.Depth), a.Name, a.ID, a.State, runs, len(a.Inbox), ago(a.LastActive), a.Task, doing(a))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(d.Tasks) > 0 {
			fmt.Fprintln(e.stdout)
			if err := printTaskTable(e.stdout, d.Tasks, agentNames(d.Agents)); err != nil {
				return err
			}
		}
		if len(d.Approvals) > 0 {
			fmt.Fprintln(e.stdout, "\npermission requests waiting for an answer:")
			for _, p := range d.Approvals {
				fmt.Fprintf(e.stdout, "  %s  %s wants %s %s (deadline %s)\n", p.ID, agentName(d.Agents, p.Agent), p.Tool, text.OneLine(string(p.Input), 80), p.Deadline.Local().Format(time.TimeOnly))
			}
		}
		printStatus(e, d.Status, false)
		if len(d.Drops) > 0 {
			fmt.Fprintf(e.stdout, "\nDROPS: %v\n", d.Drops)
		}
		return nil
	})
}

// doing says what an agent is doing or waiting on: its run and round, if
// it has one, then its why; "NEEDS YOU" when only a person can move it on.
func doing(a vigil.Agent) string {
	why := a.Why.Text
	if a.Why.NeedsYou {
		why = "NEEDS YOU: " + why
	}
	if r := a.Run; r != nil {
		return fmt.Sprintf("run %d round %d: %s", r.Seq, r.Round, why)
	}
	return why
}

// agentName is the name of agent id among agents: "main" for the main
// agent, else the id when agents do not hold it.
func agentName(agents []vigil.Agent, id vigil.AgentID) string {
	for _, a := range agents {
		if a.ID == id {
			return a.Name
		}
	}
	if id == vigil.MainAgent {
		return "main"
	}
	return string(id)
}

// printStatus prints the non-empty inboxes and why each is not draining.
func printStatus(e *env, inboxes []vigil.InboxStatus, always bool) {
	if len(inboxes) == 0 {
		if always {
			fmt.Fprintln(e.stdout, "every inbox is empty")
		}
		return
	}
	fmt.Fprintln(e.stdout, "\ninboxes:")
	for _, st := range inboxes {
		state := "not draining"
		if st.Draining {
			state = "draining"
		}
		held := ""
		if st.Held > 0 {
			held = fmt.Sprintf(", %d held", st.Held)
		}
		// The reason names its own deadline (a retry's time, an
		// approval's), so that no deadline reads as that of something
		// else the line mentions (a hold has none).
		fmt.Fprintf(e.stdout, "  %s (%s, %s): %d item(s)%s, %s: %s", st.Name, st.Agent, st.State, st.Items, held, state, st.Reason)
		if st.ClearsOn != "" {
			fmt.Fprintf(e.stdout, " (clears on %s)", st.ClearsOn)
		}
		fmt.Fprintln(e.stdout)
	}
}

func cmdStatus(ctx context.Context, e *env, args []string) error {
	return sessionView(ctx, e, "status", args, []string{"status"}, func(st *server.StatusView) error {
		printStatusView(e, *st)
		return nil
	})
}

func printStatusView(e *env, st server.StatusView) {
	switch {
	case st.Closed:
		fmt.Fprintf(e.stdout, "session %s is closed\n", st.Session)
	case st.Quiescent:
		fmt.Fprintf(e.stdout, "session %s is quiescent\n", st.Session)
	default:
		fmt.Fprintf(e.stdout, "session %s is working\n", st.Session)
	}
	if st.Hold != nil {
		fmt.Fprintf(e.stdout, "user prompts HELD by %s since %s%s\n", orDefault(st.Hold.By, "the user"), ago(st.Hold.Since), reasonSuffix(st.Hold.Reason))
	}
	if len(st.Agents) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tSTATE\tWHY")
		for _, a := range st.Agents {
			if a.State == vigil.AgentClosed && !st.Closed {
				continue
			}
			why := a.Why.Text
			if a.Why.NeedsYou {
				why = "NEEDS YOU: " + why
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Name, a.State, why)
		}
		tw.Flush()
	}
	for _, p := range st.Progress {
		line := fmt.Sprintf("%s run %d: waiting on %s since %s", p.Name, p.Run, p.Waiting, ago(p.Since))
		if p.Stalled != "" {
			line = fmt.Sprintf("%s run %d: %s", p.Name, p.Run, p.Stalled)
		}
		fmt.Fprintln(e.stdout, line)
	}
	fmt.Fprintf(e.stdout, "used: %s\nbudget: %s%s\n", spendLine(st.Spent), st.Budget.String(), remainingLine(st.Budget, st.Spent))
	if iso := st.Isolation; iso.Sandbox != "" {
		network := "network off"
		if iso.Network {
			network = "network on"
		}
		fmt.Fprintf(e.stdout, "commands: sandbox %s, %s; %s\n", iso.Sandbox, network, iso.Containment)
		if iso.Warning != "" {
			fmt.Fprintf(e.stdout, "WARNING: %s\n", iso.Warning)
		}
	}
	printStatus(e, st.Inboxes, true)
}

func cmdSend(ctx context.Context, e *env, args []string) error {
	var prio string
	var maxRounds int
	cf, pos, err := clientCommand(e, "send", `send <session> "prompt" [--priority now|next|later] [--max-rounds N]`, 2, args, func(fs *flag.FlagSet) {
		fs.StringVar(&prio, "priority", "", "now (interrupts the model round in flight), next (default: joins the running turn) or later (waits for the turn to end)")
		fs.IntVar(&maxRounds, "max-rounds", 0, "the most model rounds of the run that takes the prompt; it then ends round_limit (0: no bound)")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "prompts"), server.PromptRequest{Text: pos[1], Priority: vigil.Priority(prio), MaxRounds: maxRounds})
	if err != nil {
		return err
	}
	res, done, err := answer[server.PromptResult](e, cf, b)
	if done {
		return err
	}
	fmt.Fprintf(e.stdout, "queued %s for the main agent of %s\n", res.Item, res.Session)
	return nil
}

// cmdMessage sends a message and prints what happened to it at once: the
// server never waits on the target's model, so while the target's model
// round is in flight the outcome is pending. With --wait it then follows
// the session's events until the outcome is settled and prints that.
func cmdMessage(ctx context.Context, e *env, args []string) error {
	var prio string
	var wait bool
	cf, pos, err := clientCommand(e, "message", `message <session> <agent> "text" [--priority now|next|later] [--wait]`, 3, args, func(fs *flag.FlagSet) {
		fs.StringVar(&prio, "priority", "", "now, next (default) or later")
		fs.BoolVar(&wait, "wait", false, "when the outcome is pending (the agent's model round is in flight), wait for that round to settle it, and print the settled outcome")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "agents", pos[1], "messages"), server.MessageRequest{Text: pos[2], Priority: vigil.Priority(prio)})
	if err != nil {
		return err
	}
	var m vigil.Message
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	if wait && m.Outcome == vigil.OutcomePending {
		fmt.Fprintf(e.stderr, "message %s → %s: pending (run %d's model round is in flight); waiting for it to settle…\n", m.ID, pos[1], m.Run)
		settled, raw, err := settleMessage(ctx, c, pos[0], m.ID)
		if err != nil {
			return fmt.Errorf("wait for message %s: %w", m.ID, err)
		}
		m, b = *settled, raw
	}
	if m.Outcome == vigil.OutcomeRejected {
		// Said once, as the command's error; --json still prints the
		// answer for programs.
		if cf.json {
			if err := printRaw(e, b); err != nil {
				return err
			}
		}
		return &exitError{code: 1, err: fmt.Errorf("message %s → %s rejected: %s", m.ID, pos[1], m.Reason)}
	}
	if cf.json {
		return printRaw(e, b)
	}
	fmt.Fprintf(e.stdout, "message %s → %s: %s\n", m.ID, pos[1], describeOutcome(&m))
	return nil
}

// settleMessage follows a session's events until its message is no longer
// pending, and returns the message and the server's JSON of it.
func settleMessage(ctx context.Context, c *apiClient, session string, id vigil.MessageID) (*vigil.Message, []byte, error) {
	get := func() (*vigil.Message, []byte, error) {
		var m vigil.Message
		b, err := c.get(ctx, sessionPath(session, "messages", string(id)), &m)
		if err != nil {
			return nil, nil, err
		}
		return &m, b, nil
	}
	// The session's position first, then the message: an outcome settled
	// after this read is an event after that position.
	var d vigil.SessionDetail
	if _, err := c.get(ctx, sessionPath(session), &d); err != nil {
		return nil, nil, err
	}
	after := d.Seq
	for {
		m, b, err := get()
		if err != nil || m.Outcome != vigil.OutcomePending {
			return m, b, err
		}
		settled := false
		err = c.stream(ctx, sessionPath(session, "events"), after, func(ev vigil.Event, _ string) bool {
			if ev.Seq > 0 {
				after = ev.Seq
			}
			if ev.Type == "message.resolved" || ev.Type == "session.closed" {
				settled = true
				return false
			}
			return true
		})
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		var ae *apiError
		if err != nil && errors.As(err, &ae) && ae.status < 500 {
			return nil, nil, err
		}
		if !settled {
			// The stream ended or broke: read the message again, then
			// go on from the last event seen.
			if err := c.sleep(ctx, 250*time.Millisecond); err != nil {
				return nil, nil, err
			}
		}
	}
}

// describeOutcome says what happened to a message, in words.
func describeOutcome(m *vigil.Message) string {
	switch m.Outcome {
	case vigil.OutcomeJoined:
		return fmt.Sprintf("joined (run %d sees it at its next model round)", m.Run)
	case vigil.OutcomeQueuedBehindStop:
		why := m.Reason
		if why == "" {
			why = fmt.Sprintf("run %d was ending", m.Run)
		}
		return fmt.Sprintf("queued-behind-stop (%s; run %d answers)", why, m.Run+1)
	case vigil.OutcomeResumed:
		return fmt.Sprintf("resumed (the agent was idle; run %d answers)", m.Run)
	case vigil.OutcomeRejected:
		return "rejected: " + m.Reason
	case vigil.OutcomePending:
		return fmt.Sprintf("pending: run %d's model round is in flight; the message joins run %d if the run goes on, else run %d answers (--wait prints the settled outcome)", m.Run, m.Run, m.Run+1)
	}
	return string(m.Outcome)
}

func cmdTasks(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "tasks", "tasks <session>", 1, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	if cf.json {
		b, err := c.get(ctx, sessionPath(pos[0], "tasks"), nil)
		if err != nil {
			return err
		}
		return printRaw(e, b)
	}
	// The session's detail: its tasks and the names of their agents.
	var d vigil.SessionDetail
	if _, err := c.get(ctx, sessionPath(pos[0]), &d); err != nil {
		return err
	}
	if len(d.Tasks) == 0 {
		fmt.Fprintln(e.stdout, "no tasks")
		return nil
	}
	return printTaskTable(e.stdout, d.Tasks, agentNames(d.Agents))
}

func cmdStop(ctx context.Context, e *env, args []string) error {
	var sess string
	cf, pos, err := clientCommand(e, "stop", "stop <session>/<task>  |  stop <task> --session <session>", 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&sess, "session", "", "the task's session")
	})
	if err != nil {
		return err
	}
	id, task, err := taskRef(pos[0], sess)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", sessionPath(string(id), "tasks", string(task), "stop"), nil)
	if err != nil {
		return err
	}
	t, done, err := answer[vigil.Task](e, cf, b)
	if done {
		return err
	}
	fmt.Fprintf(e.stdout, "task %s: %s\n", t.ID, t.Status)
	return nil
}

func cmdRetry(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "retry", "retry <session> <agent>", 2, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "agents", pos[1], "retry"), nil)
	if err != nil {
		return err
	}
	a, done, err := answer[vigil.Agent](e, cf, b)
	if done {
		return err
	}
	line := fmt.Sprintf("agent %s: %s", a.Name, a.State)
	if a.Run != nil {
		line += fmt.Sprintf(", run %d started for %d item(s)", a.Run.Seq, len(a.Run.Items))
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}

func cmdHold(ctx context.Context, e *env, args []string) error {
	var reason string
	cf, pos, err := clientCommand(e, "hold", "hold <session> [--reason TEXT]", 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "why, shown in status")
	})
	if err != nil {
		return err
	}
	return holdOrResume(ctx, e, cf, sessionPath(pos[0], "hold"), server.HoldRequest{Reason: reason})
}

func cmdResume(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "resume", "resume <session>", 1, args, nil)
	if err != nil {
		return err
	}
	return holdOrResume(ctx, e, cf, sessionPath(pos[0], "resume"), nil)
}

func holdOrResume(ctx context.Context, e *env, cf *clientFlags, path string, body any) error {
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", path, body)
	if err != nil {
		return err
	}
	st, done, err := answer[server.StatusView](e, cf, b)
	if done {
		return err
	}
	printStatusView(e, st)
	return nil
}

func cmdApprove(ctx context.Context, e *env, args []string) error {
	var deny, always, save bool
	var reason, input string
	cf, pos, err := clientCommand(e, "approve", "approve <session> <request> [--always [--save] | --deny] [--input JSON] [--reason TEXT]", 2, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&deny, "deny", false, "deny the request instead")
		fs.StringVar(&input, "input", "", "allow the call with this tool input (a JSON object) instead of the model's")
		fs.BoolVar(&always, "always", false, "allow, and add a session rule that allows the same call again")
		fs.BoolVar(&save, "save", false, "with --always: also keep the rule for the session's project directory, for later sessions there")
		fs.StringVar(&reason, "reason", "", "why, told to the agent")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	if deny && always {
		return &exitError{code: 2, err: errors.New("give --always or --deny, not both")}
	}
	if save && !always {
		return &exitError{code: 2, err: errors.New("--save goes with --always")}
	}
	if input != "" && deny {
		return &exitError{code: 2, err: errors.New("--input goes with allowing, not --deny")}
	}
	if input != "" && save {
		return &exitError{code: 2, err: errors.New("--save keeps the rule of the model's own call; --input goes without it")}
	}
	if input != "" && !json.Valid([]byte(input)) {
		return &exitError{code: 2, err: fmt.Errorf("--input %q is not JSON", input)}
	}
	allow := !deny
	req := server.ApprovalRequest{Allow: &allow, Always: always, Save: save, Reason: reason}
	if input != "" {
		req.Input = json.RawMessage(input)
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "approvals", pos[1]), req)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, b)
	}
	verb := "allowed"
	switch {
	case deny:
		verb = "denied"
	case always && save:
		verb = "allowed (and the same call from now on, in this project's later sessions too)"
	case always:
		verb = "allowed (and the same call from now on)"
	}
	var left server.ApprovalList
	if err := json.Unmarshal(b, &left); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	fmt.Fprintf(e.stdout, "%s %s; %d request(s) still waiting\n", verb, pos[1], len(left.Approvals))
	return nil
}

func cmdNew(ctx context.Context, e *env, args []string) error {
	var req server.CreateSessionRequest
	var mode string
	var allow, deny stringList
	cf, pos, err := clientCommand(e, "new", "new \"prompt\" [--title T] [--provider P] [--model M] [--cwd DIR] [--permission-mode MODE]\n\n"+permissionDefaults, 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Title, "title", "", "title (default: the prompt's first line)")
		fs.StringVar(&req.Provider, "provider", "", "model provider (default: the server's)")
		fs.StringVar(&req.Model, "model", "", "model name")
		fs.StringVar(&req.Cwd, "cwd", "", "working directory on the server (default: the current directory when the server is local)")
		fs.StringVar(&mode, "permission-mode", "", "ask, accept-edits, auto or bypass (default: the server's config, else ask: a person answers)")
		fs.Var(&allow, "allow", "allow rule, e.g. 'Bash(go test *)' (repeatable)")
		fs.Var(&deny, "deny", "deny rule (repeatable)")
	})
	if err != nil {
		return err
	}
	req.Prompt = pos[0]
	if mode != "" || len(allow) > 0 || len(deny) > 0 {
		req.Permissions = &vigil.Permissions{Mode: vigil.PermissionMode(mode), Allow: allow, Deny: deny}
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	if req.Cwd == "" && isLocal(c.base) {
		if wd, err := os.Getwd(); err == nil {
			req.Cwd = wd
		}
	}
	b, _, err := c.do(ctx, "POST", "/api/sessions", req)
	if err != nil {
		return err
	}
	d, done, err := answer[vigil.SessionDetail](e, cf, b)
	if done {
		return err
	}
	fmt.Fprintln(e.stdout, d.Session.ID)
	fmt.Fprintf(e.stderr, "created session %s; follow it with: vigil logs -f %s\n", d.Session.ID, d.Session.ID)
	return nil
}

// isLocal reports whether the server runs on this machine.
func isLocal(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	h := u.Hostname()
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// cmdLogs prints a session's timeline from its event stream. Without -f
// it stops at the last event committed when it started; with -f it
// follows, and after a dropped connection reconnects with Last-Event-ID so
// no event is missed or printed twice.
func cmdLogs(ctx context.Context, e *env, args []string) error {
	var follow bool
	cf, pos, err := clientCommand(e, "logs", "logs [-f] <session>", 1, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "f", false, "follow: keep printing new events, reconnecting when the connection drops")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	var d vigil.SessionDetail
	if _, err := c.get(ctx, sessionPath(pos[0]), &d); err != nil {
		return err
	}
	format := "text"
	if cf.json {
		format = "raw"
	}
	tl := newTimeline(e.stdout, d.Session.Created, format, d.Agents...)
	until := d.Seq
	if !follow && until == 0 {
		return nil
	}
	var last int64
	wait := 250 * time.Millisecond
	for {
		err := c.stream(ctx, sessionPath(pos[0], "events"), last, func(ev vigil.Event, raw string) bool {
			if ev.Live {
				// The text a model streams: shown while it streams,
				// with no place in the stream to resume from.
				if follow {
					if cf.json {
						fmt.Fprintln(e.stdout, raw)
					} else {
						tl.record(ev)
					}
				}
				return true
			}
			last = ev.Seq
			if cf.json {
				fmt.Fprintln(e.stdout, raw)
			} else {
				tl.record(ev)
			}
			return follow || last < until
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && !follow:
			return nil
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.status < 500 {
			return err
		}
		if !follow {
			return err
		}
		if err == nil {
			err = errors.New("the server ended the stream")
		}
		fmt.Fprintf(e.stderr, "event stream lost (%v); reconnecting after event %d…\n", err, last)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// stream reads an event stream from after, calling fn for each event
// until fn returns false (then nil), the stream ends (nil) or fails.
func (c *apiClient) stream(ctx context.Context, path string, after int64, fn func(ev vigil.Event, raw string) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From the beginning (after=0) or after the last event seen: a server
	// starts a stream that names neither at its current end. A
	// Last-Event-ID header, when set below, wins.
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	resp, err := c.send(ctx, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", c.base+path+sep+"after="+strconv.FormatInt(after, 10), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		if after > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
		}
		return req, nil
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return answerError(resp.StatusCode, b)
	}
	err = readSSE(resp.Body, func(f sseFrame) error {
		if f.Event == cutEventType {
			var cut server.CutEvent
			_ = json.Unmarshal([]byte(f.Data), &cut)
			return fmt.Errorf("the server cut the stream (%s: %s); it resumes after event %d", cut.Reason, cut.Message, cut.ResumeAfter)
		}
		var ev vigil.Event
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			return fmt.Errorf("bad event %q: %w", text.OneLine(f.Data, 100), err)
		}
		if !fn(ev, f.Data) {
			return errStopStream
		}
		return nil
	})
	if errors.Is(err, errStopStream) {
		return nil
	}
	return err
}

// cutEventType is the event a server ends a stream early with
// (server.CutEvent): the client reconnects after the last event it has.
const cutEventType = "vigil.cut"

// errStopStream stops readSSE when the caller has what it wants.
var errStopStream = errors.New("stop reading the stream")

// maxSSEFrame bounds the data of one event: a stream that never ends a
// frame cannot take all of the client's memory.
const maxSSEFrame = 32 << 20

// sseFrame is one dispatched Server-Sent Events frame.
type sseFrame struct {
	// ID is the frame's id field, when it had one (HasID).
	ID    string
	HasID bool
	// Event is the frame's event type, "message" when it names none.
	Event string
	// Data is the frame's data lines joined with "\n".
	Data string
}

// readSSE reads an event stream as the EventSource standard does: lines
// end with "\n", "\r\n" or "\r"; a line starting with ":" is a comment;
// "field: value" with one optional space after the colon; data lines join
// with "\n"; a blank line dispatches the frame, unless it has no data; what
// is left at the end of the stream is dropped. It calls fn for each frame
// and returns fn's first error, the read error, or nil at the end.
func readSSE(r io.Reader, fn func(sseFrame) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSEFrame)
	sc.Split(splitSSELines())
	var f sseFrame
	var data strings.Builder
	hasData := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData {
				f.Data = data.String()
				if f.Event == "" {
					f.Event = "message"
				}
				if err := fn(f); err != nil {
					return err
				}
			}
			f, hasData = sseFrame{}, false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if data.Len()+len(value)+1 > maxSSEFrame {
				return fmt.Errorf("read event stream: an event is over %d bytes", maxSSEFrame)
			}
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			f.Event = value
		case "id":
			if !strings.ContainsRune(value, 0) {
				f.ID, f.HasID = value, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read event stream: %w", err)
	}
	return nil
}

// splitSSELines returns a bufio.SplitFunc for the lines of an event
// stream. It remembers how far it looked for a line's end, so that a long
// line arriving in small reads is scanned once.
func splitSSELines() bufio.SplitFunc {
	seen := 0 // bytes of the current line known to hold no line end
	return func(data []byte, atEOF bool) (int, []byte, error) {
		i := bytes.IndexAny(data[min(seen, len(data)):], "\r\n")
		if i >= 0 {
			i += min(seen, len(data))
		}
		switch {
		case i < 0:
			seen = len(data)
			if atEOF && len(data) > 0 {
				seen = 0
				return len(data), data, nil
			}
			return 0, nil, nil
		case data[i] == '\n':
			seen = 0
			return i + 1, data[:i], nil
		case i+1 < len(data):
			seen = 0
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		case atEOF:
			seen = 0
			return i + 1, data[:i], nil
		}
		seen = i // a "\r" at the end: is "\n" next?
		return 0, nil, nil
	}
}

// ago formats how long ago t was, the one time format of the client's
// tables ("just now", "42s ago", "3m ago", "2h05m ago", "3d ago"); --json
// answers carry RFC 3339 times. A time in the future reads "in 3m".
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return relTime(time.Since(t))
}

// relTime formats how long ago something was, d after it; a negative d is
// a time to come.
func relTime(d time.Duration) string {
	if d < 0 {
		if d > -time.Second {
			return "just now"
		}
		return "in " + strings.TrimSuffix(relTime(-d), " ago")
	}
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// sessionView runs a read-only command on one session: it GETs the path
// under the session and prints the raw JSON with --json, else calls show.
func sessionView[T any](ctx context.Context, e *env, name string, args []string, sub []string, show func(*T) error) error {
	cf, pos, err := clientCommand(e, name, name+" <session>", 1, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	var v T
	b, err := c.get(ctx, sessionPath(pos[0], sub...), &v)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, b)
	}
	return show(&v)
}

func cmdBudget(ctx context.Context, e *env, args []string) error {
	var agent string
	var bf budgetFlags
	cf, pos, err := clientCommand(e, "budget", "budget <session> [--agent A] [--tokens N] [--rounds N] [--wall D] [--usd X]", 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "an agent (id or name): set its tree's budget instead of the session's")
		fs.Int64Var(&bf.tokens, "tokens", 0, "tokens, input and output (0: no bound)")
		fs.IntVar(&bf.rounds, "rounds", 0, "model rounds (0: no bound)")
		fs.DurationVar(&bf.wall, "wall", 0, "run time, summed over runs (0: no bound)")
		fs.Float64Var(&bf.usd, "usd", 0, "US dollars over models with a known price (0: no bound)")
	})
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	req := server.BudgetRequest{Agent: agent, Tokens: bf.tokens, Rounds: bf.rounds, WallSeconds: int64(bf.wall / time.Second), CostUSD: bf.usd}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "budget"), req)
	if err != nil {
		return err
	}
	v, done, err := answer[server.BudgetView](e, cf, b)
	if done {
		return err
	}
	scope := "session " + pos[0]
	if v.Agent != "" {
		scope = "agent tree of " + v.Agent
	}
	fmt.Fprintf(e.stdout, "%s: budget %s; used %s\n", scope, v.Budget.String(), spendLine(v.Spent))
	return nil
}

func cmdMode(ctx context.Context, e *env, args []string) error {
	cf, pos, err := clientCommand(e, "mode", "mode <session> <ask|accept-edits|auto|bypass>", 2, args, nil)
	if err != nil {
		return err
	}
	c, err := cf.client(e)
	if err != nil {
		return err
	}
	b, _, err := c.do(ctx, "POST", sessionPath(pos[0], "permissions"), server.PermissionModeRequest{Mode: pos[1]})
	if err != nil {
		return err
	}
	v, done, err := answer[vigil.Permissions](e, cf, b)
	if done {
		return err
	}
	fmt.Fprintf(e.stdout, "session %s: permission mode %s; pending requests it decides were answered\n", pos[0], v.Mode)
	return nil
}

// spendLine formats what a scope used.
func spendLine(s vigil.Spend) string {
	u := s.Usage
	line := fmt.Sprintf("%d tokens (in %d, out %d, cache read %d, cache write %d), %d rounds, %s run time",
		u.Total(), u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, s.Rounds, s.Wall.Round(time.Millisecond))
	switch {
	case s.Unpriced > 0 && s.CostMicros == 0:
		line += ", cost unknown (no price for the model)"
	case s.Unpriced > 0:
		line += fmt.Sprintf(", %s for the priced rounds (%d rounds unpriced)", vigil.USD(s.CostMicros), s.Unpriced)
	default:
		line += ", " + vigil.USD(s.CostMicros)
	}
	return line
}

// remainingLine says what a budget has left: "; left: 1200 tokens, 30 rounds".
func remainingLine(b vigil.Budget, s vigil.Spend) string {
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", max(b.Tokens-s.Usage.Total(), 0)))
	}
	if b.Rounds > 0 {
		parts = append(parts, fmt.Sprintf("%d rounds", max(b.Rounds-s.Rounds, 0)))
	}
	if b.Wall > 0 {
		parts = append(parts, max(b.Wall-s.Wall, 0).Round(time.Second).String()+" run time")
	}
	if b.CostMicros > 0 {
		parts = append(parts, vigil.USD(max(b.CostMicros-s.CostMicros, 0)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; left: " + strings.Join(parts, ", ")
}
