// Command vigil runs durable AI-agent sessions in which the signal that
// background work came back is never lost.
//
//	vigil run [flags] "prompt"     one headless session, like claude -p
//	vigil sim [flags]              the deterministic simulator
//
// Run "vigil help" for every command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/ccwire"
	"golang.org/x/term"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what commands read and write; tests give their own.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal reports whether stdin and stdout are a terminal: then
	// 'vigil' with no arguments opens the terminal client. nil: never.
	terminal func() bool
	// sleep waits before a client retries a request; nil waits for real.
	sleep func(ctx context.Context, d time.Duration) error
}

// exitError carries a process exit code.
type exitError struct {
	code int
	err  error
}

// Error implements error.
func (e *exitError) Error() string { return e.err.Error() }

func commands() map[string]command {
	return map[string]command{
		"run":        {"run one session headless until it is quiescent, printing its timeline", cmdRun},
		"sim":        {"run the deterministic simulator over many seeds", cmdSim},
		"bench":      {"measure wake latency and notification throughput", cmdBench},
		"serve":      {"serve the HTTP API, live event streams, metrics and the web UI", cmdServe},
		"new":        {"create a session on a running server: vigil new \"prompt\"", cmdNew},
		"sessions":   {"list the server's sessions", cmdSessions},
		"show":       {"show a session: agents, tasks, permission requests, inboxes", cmdShow},
		"send":       {"queue a user prompt: vigil send <session> \"prompt\" [--priority]", cmdSend},
		"message":    {"message an agent and print what happened to it at once (--wait: once settled): vigil message <session> <agent> \"text\"", cmdMessage},
		"tasks":      {"list a session's tasks", cmdTasks},
		"stop":       {"stop a task: vigil stop <session>/<task>", cmdStop},
		"output":     {"print a shell task's output; -f follows it until the task ends: vigil output <session>/<task> [-f]", cmdOutput},
		"close":      {"close an agent and what it owns, or the whole session: vigil close <session> [agent]", cmdClose},
		"transcript": {"print an agent's transcript, readable (--json: the raw JSONL lines): vigil transcript <session> [agent]", cmdTranscript},
		"cancel":     {"remove a queued item from an inbox: vigil cancel <session> <item>", cmdCancel},
		"version":    {"print vigil's version, commit and build time (also: vigil --version)", cmdVersion},
		"retry":      {"run a blocked or backing-off agent now: vigil retry <session> <agent>", cmdRetry},
		"budget":     {"set a session's or an agent tree's budget: vigil budget <session> [--agent A] --tokens N --rounds N --wall D --usd X", cmdBudget},
		"hold":       {"hold a session's queue of user prompts", cmdHold},
		"resume":     {"release the hold on a session's user prompts", cmdResume},
		"status":     {"list a session's non-empty inboxes and why each is not draining", cmdStatus},
		"logs":       {"print a session's timeline; -f follows it", cmdLogs},
		"approve":    {"answer a permission request: vigil approve <session> <request> [--always | --deny] [--input JSON]", cmdApprove},
		"mode":       {"change a session's permission mode: vigil mode <session> <ask|accept-edits|auto|bypass>", cmdMode},
		"nodes":      {"list the nodes of the server's cluster: address, state, sessions, last heartbeat", cmdNodes},
		"mcp":        {"serve the MCP tools (durable background agents) on stdio, for Claude Code and other MCP clients", cmdMCP},
		"doctor":     {"find lost replies, missed wakes, held continuations and stuck subagents in Claude Code, T3 Code or vigil files", cmdDoctor},
		"chat":       {"the terminal client on a new session, in this process or on a server (--server); 'vigil' alone in a terminal opens it", cmdChat},
		"attach":     {"the terminal client on an existing session of a running server: vigil attach <session>", cmdAttach},
	}
}

func main() {
	vigil.Main() // a sandboxed command's launcher never returns from it
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, terminal: func() bool {
		return term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	}}
	os.Exit(runMain(ctx, e, os.Args[1:]))
}

func runMain(ctx context.Context, e *env, args []string) int {
	cmds := commands()
	if len(args) > 0 && strings.HasPrefix(args[0], "-") && ccwire.IsStreamJSON(args) {
		// Run as Claude Code would be, by the Agent SDK or another
		// program written for it: no subcommand, stream-json both ways.
		if err := runStreamJSON(ctx, e, args); err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				if ee.err != nil {
					fmt.Fprintf(e.stderr, "vigil: %v\n", ee.err)
				}
				return ee.code
			}
			fmt.Fprintf(e.stderr, "vigil: %v\n", err)
			return 1
		}
		return 0
	}
	if len(args) == 0 && e.terminal != nil && e.terminal() {
		args = []string{"chat"}
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "vigil: unknown command %q\n\n", args[0])
		usage(e.stderr, cmds)
		return 2
	}
	if err := c.run(ctx, e, args[1:]); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil && ee.err.Error() != "" {
				fmt.Fprintf(e.stderr, "vigil %s: %v\n", args[0], ee.err)
			}
			return ee.code
		}
		fmt.Fprintf(e.stderr, "vigil %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: vigil <command> [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "  %s\t%s\n", n, cmds[n].summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n\nRun 'vigil <command> -h' for a command's flags; 'vigil --version' for the version.\n", permissionDefaults)
}

// permissionDefaults states the one rule for a session's default
// permission mode, in 'vigil help' and the usage of the commands that
// create sessions.
const permissionDefaults = `Permission mode: a session a person can answer (vigil chat, vigil new, the web
UI, the API) defaults to ask: each tool call that changes something waits for
an answer. vigil run, a one-shot job nobody can answer while it runs, defaults
to auto: allow rules decide and the rest is denied, nobody is asked.
--permission-mode or the config file's permission_mode overrides both.`
