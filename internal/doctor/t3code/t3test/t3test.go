// Package t3test builds T3 Code state databases for doctor's tests: a new
// SQLite file, T3 Code's own schema (testdata/schema.sql, the DDL of its
// migrations copied verbatim from pingdotgg/t3code; see the file for the
// commits), and the rows of the scenarios below. README.md says what each
// scenario holds and why.
package t3test

import (
	"context"
	"database/sql"
	_ "embed" // the schema
	"encoding/json"
	"fmt"
	"os"

	_ "modernc.org/sqlite" // the "sqlite" driver, to write the fixtures
)

//go:embed testdata/schema.sql
var schema string

// Part inserts the rows of one scenario.
type Part func(ctx context.Context, tx *sql.Tx) error

// Build creates the database at path (which must not exist), runs T3
// Code's schema statements and inserts the parts' rows, in WAL mode as T3
// Code keeps it. The file is closed, and its write-ahead log checkpointed
// away, when Build returns.
func Build(ctx context.Context, path string, parts ...Part) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("build %s: the file exists", path)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("build %s: schema: %w", path, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	defer func() { _ = tx.Rollback() }()
	for i, p := range parts {
		if err := p(ctx, tx); err != nil {
			return fmt.Errorf("build %s: part %d: %w", path, i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	return nil
}

// rows collects inserts; the first error stops the rest.
type rows struct {
	ctx context.Context
	tx  *sql.Tx
	err error
	n   int // events inserted, for their ids
}

func (r *rows) exec(q string, args ...any) {
	if r.err != nil {
		return
	}
	if _, err := r.tx.ExecContext(r.ctx, q, args...); err != nil {
		r.err = fmt.Errorf("%.60s…: %w", q, err)
	}
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings, numbers and nulls always encode
	}
	return string(b)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const instance = "claude-public-pool"

func (r *rows) thread(id, title, providerThread, created, updated string) {
	r.exec(`INSERT INTO orchestration_v2_projection_threads (thread_id, project_id, title, default_provider, runtime_mode,
		interaction_mode, active_provider_thread_id, created_at, updated_at, archived_at, deleted_at, payload_json, provider_instance_id)
		VALUES (?, 'project-vigil', ?, 'claudeAgent', 'full-access', 'default', ?, ?, ?, NULL, NULL, ?, ?)`,
		id, title, nullable(providerThread), created, updated,
		js(map[string]any{"id": id, "projectId": "project-vigil", "title": title, "createdAt": created, "updatedAt": updated, "archivedAt": nil, "deletedAt": nil}), instance)
}

func (r *rows) providerSession(id, thread, status, updated string) {
	r.exec(`INSERT INTO orchestration_v2_projection_provider_sessions (provider_session_id, thread_id, provider, status, model,
		updated_at, payload_json, driver, provider_instance_id) VALUES (?, ?, 'claudeAgent', ?, 'claude-fable-5-1', ?, ?, 'claudeAgent', ?)`,
		id, thread, status, updated,
		js(map[string]any{"id": id, "driver": "claudeAgent", "providerInstanceId": instance, "status": status, "cwd": "/home/dev/vigil",
			"model": "claude-fable-5-1", "createdAt": "2026-10-15T08:02:11.000Z", "updatedAt": updated, "lastError": nil}), instance)
}

func (r *rows) providerThread(id, thread, session, status string, first, last int, updated string) {
	r.exec(`INSERT INTO orchestration_v2_projection_provider_threads (provider_thread_id, thread_id, owner_node_id, provider,
		provider_session_id, status, first_run_ordinal, last_run_ordinal, updated_at, payload_json, driver, provider_instance_id)
		VALUES (?, ?, NULL, 'claudeAgent', ?, ?, ?, ?, ?, ?, 'claudeAgent', ?)`,
		id, thread, session, status, first, last, updated,
		js(map[string]any{"id": id, "driver": "claudeAgent", "providerInstanceId": instance, "providerSessionId": session, "appThreadId": thread,
			"ownerNodeId": nil, "status": status, "firstRunOrdinal": first, "lastRunOrdinal": last, "handoffIds": []string{},
			"forkedFrom": nil, "pendingBackgroundTasks": []any{}, "createdAt": "2026-10-15T08:02:11.000Z", "updatedAt": updated}), instance)
}

// runSpec is one run row.
type runSpec struct {
	thread, providerThread string
	ordinal                int
	status                 string
	requested, started     string
	completed              string
	held                   bool
	wakeOf                 string // workStartedAt: set on wake runs
	text                   string // the run's user message
	notification           bool   // the message carries a notification (a wake)
	reply                  string // an assistant message of the run
}

func (r *rows) run(s runSpec) string {
	id := fmt.Sprintf("run:%s:%d", s.thread, s.ordinal)
	msg := fmt.Sprintf("message:%s:%d", s.thread, s.ordinal)
	p := map[string]any{
		"id": id, "threadId": s.thread, "ordinal": s.ordinal, "providerInstanceId": instance, "providerThreadId": s.providerThread,
		"userMessageId": msg, "rootNodeId": nil, "activeAttemptId": nil, "status": s.status,
		"requestedAt": s.requested, "startedAt": nullable(s.started), "completedAt": nullable(s.completed),
		"checkpointId": nil, "contextHandoffId": nil,
	}
	if s.status == "queued" {
		p["queuePosition"] = 1
	}
	if s.held {
		p["queueHeld"] = true
	}
	if s.wakeOf != "" {
		p["workStartedAt"] = s.wakeOf
	}
	r.exec(`INSERT INTO orchestration_v2_projection_runs (run_id, thread_id, ordinal, provider, provider_thread_id, status,
		requested_at, completed_at, payload_json, provider_instance_id) VALUES (?, ?, ?, 'claudeAgent', ?, ?, ?, ?, ?, ?)`,
		id, s.thread, s.ordinal, nullable(s.providerThread), s.status, s.requested, nullable(s.completed), js(p), instance)
	m := map[string]any{"id": msg, "threadId": s.thread, "runId": id, "nodeId": nil, "role": "user", "text": s.text,
		"attachments": []any{}, "streaming": false, "createdAt": s.requested, "updatedAt": s.requested}
	if s.notification {
		m["notification"] = map[string]any{"source": map[string]any{"kind": "background_task", "work": "subagent"}, "outcome": "completed", "summary": s.text}
	}
	r.message(msg, s.thread, id, "user", s.requested, m)
	if s.reply != "" {
		at := s.completed
		if at == "" {
			at = s.requested
		}
		rid := msg + ":reply"
		r.message(rid, s.thread, id, "assistant", at, map[string]any{"id": rid, "threadId": s.thread, "runId": id, "nodeId": nil,
			"role": "assistant", "text": s.reply, "attachments": []any{}, "streaming": false, "createdAt": at, "updatedAt": at})
	}
	r.event(s.thread, id, "", "run.updated", s.requested, p)
	if s.completed != "" {
		r.event(s.thread, id, "", "run.updated", s.completed, p)
	}
	return id
}

func (r *rows) message(id, thread, run, role, at string, payload map[string]any) {
	r.exec(`INSERT INTO orchestration_v2_projection_messages (message_id, thread_id, run_id, node_id, role, streaming, created_at,
		updated_at, payload_json) VALUES (?, ?, ?, NULL, ?, 0, ?, ?, ?)`, id, thread, run, role, at, at, js(payload))
}

func (r *rows) event(thread, run, node, typ, at string, payload any) {
	r.n++
	r.exec(`INSERT INTO orchestration_v2_events (event_id, command_id, thread_id, run_id, node_id, provider, raw_event_id,
		event_type, occurred_at, payload_json, driver, provider_instance_id) VALUES (?, NULL, ?, ?, ?, 'claudeAgent', NULL, ?, ?, ?, 'claudeAgent', ?)`,
		fmt.Sprintf("event:%s:%d", thread, r.n), thread, nullable(run), nullable(node), typ, at, js(map[string]any{"type": typ, "threadId": thread, "occurredAt": at, "payload": payload}), instance)
}

// subSpec is one subagent row.
type subSpec struct {
	id, thread, run, providerThread, child, origin, status string
	title, prompt, result                                  string
	started, completed, updated                            string
}

func (r *rows) subagent(s subSpec) {
	p := map[string]any{
		"id": s.id, "threadId": s.thread, "runId": nullable(s.run), "parentNodeId": "node:" + s.run + ":root", "origin": s.origin,
		"driver": "claudeAgent", "providerInstanceId": instance, "providerThreadId": nullable(s.providerThread),
		"childThreadId": nullable(s.child), "nativeTaskRef": nil, "prompt": s.prompt, "title": s.title, "model": "claude-sonnet-5-5",
		"status": s.status, "result": nullable(s.result), "startedAt": nullable(s.started), "completedAt": nullable(s.completed), "updatedAt": s.updated,
	}
	r.exec(`INSERT INTO orchestration_v2_projection_subagents (subagent_id, thread_id, run_id, parent_node_id, provider,
		provider_thread_id, child_thread_id, origin, status, started_at, completed_at, updated_at, payload_json, driver, provider_instance_id)
		VALUES (?, ?, ?, ?, 'claudeAgent', ?, ?, ?, ?, ?, ?, ?, ?, 'claudeAgent', ?)`,
		s.id, s.thread, nullable(s.run), "node:"+s.run+":root", nullable(s.providerThread), nullable(s.child), s.origin, s.status,
		nullable(s.started), nullable(s.completed), s.updated, js(p), instance)
	r.event(s.thread, s.run, s.id, "subagent.updated", s.updated, p)
}

// Threads of the scenarios.
const (
	HealthyThread = "3f0b6f8e-2a41-4c55-9d0e-1b2c3d4e5f60"
	HeldThread    = "618a5f71-0c2d-4b8e-a3f1-5d6e7f809a1b"
	StuckThread   = "9c2e4b17-6a38-4f0d-b5c2-7e8f9a0b1c2d"
	ChildThread   = "thread:delegated-task:9c2e4b17-6a38-4f0d-b5c2-7e8f9a0b1c2d:1"
)

// Healthy is a thread with nothing wrong: prompts and a wake run that all
// completed, a user prompt that restart recovery holds in the queue (a
// hold on a person's prompt is what queueHeld is for), a subagent that
// completed and one still running in a live provider session.
func Healthy(ctx context.Context, tx *sql.Tx) error {
	r := &rows{ctx: ctx, tx: tx}
	t, pt, ps := HealthyThread, "provider-thread:healthy", "provider-session:healthy"
	r.thread(t, "Refactor the config loader", pt, "2026-10-15T09:00:00.000Z", "2026-10-15T09:30:00.000Z")
	r.providerSession(ps, t, "running", "2026-10-15T09:30:00.000Z")
	r.providerThread(pt, t, ps, "active", 1, 3, "2026-10-15T09:30:00.000Z")
	run1 := r.run(runSpec{thread: t, providerThread: pt, ordinal: 1, status: "completed", requested: "2026-10-15T09:00:00.000Z",
		started: "2026-10-15T09:00:01.000Z", completed: "2026-10-15T09:02:00.000Z", text: "Split the loader into parse and validate; use background agents.",
		reply: "Two background agents are on it."})
	r.subagent(subSpec{id: "node:provider:claudeAgent:native-item:task%3Aa11c0ffee0000001", thread: t, run: run1, providerThread: pt,
		origin: "provider_native", status: "completed", title: "Parse", prompt: "Move parsing to parse.go.", result: "parse.go written; 6 tests pass.",
		started: "2026-10-15T09:00:30.000Z", completed: "2026-10-15T09:04:50.000Z", updated: "2026-10-15T09:04:50.000Z"})
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 2, status: "completed", requested: "2026-10-15T09:04:51.000Z",
		started: "2026-10-15T09:04:51.500Z", completed: "2026-10-15T09:06:00.000Z", wakeOf: "2026-10-15T09:00:01.000Z",
		text: "Background task completed.", notification: true, reply: "Parsing is done; validation is still running."})
	r.subagent(subSpec{id: "node:provider:claudeAgent:native-item:task%3Aa11c0ffee0000002", thread: t, run: run1, providerThread: pt,
		origin: "provider_native", status: "running", title: "Validate", prompt: "Move validation to validate.go.",
		started: "2026-10-15T09:00:31.000Z", updated: "2026-10-15T09:29:00.000Z"})
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 3, status: "queued", held: true, requested: "2026-10-15T09:30:00.000Z",
		text: "Then update the docs."})
	return r.err
}

// HeldContinuation is seed report 002: a wake run (32, "Background task
// completed.") queued with queueHeld while run 31 was finalizing; user
// prompts 33 to 35 run around it, and after it the thread records no wake
// run again, only subagent updates.
func HeldContinuation(ctx context.Context, tx *sql.Tx) error {
	r := &rows{ctx: ctx, tx: tx}
	t, pt, ps := HeldThread, "provider-thread:618a5f71", "provider-session:618a5f71"
	r.thread(t, "Release pipeline", pt, "2026-10-15T08:02:30.000Z", "2026-10-15T22:52:10.000Z")
	r.providerSession(ps, t, "running", "2026-10-15T22:52:10.000Z")
	r.providerThread(pt, t, ps, "active", 30, 36, "2026-10-15T22:52:10.000Z")
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 30, status: "completed", requested: "2026-10-15T19:40:02.000Z",
		started: "2026-10-15T19:40:02.300Z", completed: "2026-10-15T19:41:10.000Z", wakeOf: "2026-10-15T19:10:00.000Z",
		text: "Background task completed.", notification: true, reply: "The build agent finished; waiting on the test agent."})
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 31, status: "completed", requested: "2026-10-15T19:57:56.900Z",
		started: "2026-10-15T19:57:56.927Z", completed: "2026-10-15T19:57:56.956Z", wakeOf: "2026-10-15T19:10:00.000Z",
		text: "Background task completed.", notification: true, reply: "Tests pass on the build agent's output."})
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 32, status: "queued", held: true, requested: "2026-10-15T19:57:57.026Z",
		wakeOf: "2026-10-15T19:10:00.000Z", text: "Background task completed.", notification: true})
	users := [][3]string{
		{"2026-10-15T20:07:37.000Z", "2026-10-15T20:09:30.000Z", "Now bump the version."},
		{"2026-10-15T21:02:00.000Z", "2026-10-15T21:12:30.000Z", "Start the changelog and docs agents in the background."},
		{"2026-10-15T22:50:39.000Z", "2026-10-15T22:52:10.000Z", "Where are the changelog and the docs?"},
	}
	for i, u := range users {
		r.run(runSpec{thread: t, providerThread: pt, ordinal: 33 + i, status: "completed", requested: u[0], started: u[0], completed: u[1],
			text: u[2], reply: "Done."})
	}
	// The completion that was applied at once (a200992c5c0dd05ec, seed 002).
	r.subagent(subSpec{id: "node:provider:claudeAgent:native-item:task%3Aa200992c5c0dd05ec", thread: t, run: "run:" + t + ":34",
		providerThread: pt, origin: "provider_native", status: "completed", title: "Changelog", prompt: "Write the changelog entry.",
		result: "CHANGELOG.md updated.", started: "2026-10-15T21:02:40.000Z", completed: "2026-10-15T21:17:16.346Z", updated: "2026-10-15T21:17:16.346Z"})
	// Subagent progress recorded in the window where wake turns went unrecorded.
	for i, at := range []string{"2026-10-15T21:13:05.000Z", "2026-10-15T21:15:40.000Z", "2026-10-15T21:17:56.672Z", "2026-10-15T21:18:22.007Z"} {
		r.event(t, "run:"+t+":34", fmt.Sprintf("node:progress:%d", i), "subagent.updated", at, map[string]any{"progress": "working"})
	}
	return r.err
}

// StuckSubagents is the rest of seed report 002 and its relatives (T3 Code
// issues 19440 and 18910): a provider-native subagent left running after
// the Claude process that ran it exited (its provider session stopped),
// and a delegated task whose own thread completed but whose row was never
// ended (the child thread's reply is there to recover).
func StuckSubagents(ctx context.Context, tx *sql.Tx) error {
	r := &rows{ctx: ctx, tx: tx}
	t, pt, ps := StuckThread, "provider-thread:9c2e4b17", "provider-session:9c2e4b17"
	r.thread(t, "Docs migration", pt, "2026-10-15T20:55:00.000Z", "2026-10-15T22:55:10.000Z")
	r.providerSession(ps, t, "stopped", "2026-10-15T22:55:10.000Z")
	r.providerThread(pt, t, ps, "idle", 1, 2, "2026-10-15T22:55:10.000Z")
	run1 := r.run(runSpec{thread: t, providerThread: pt, ordinal: 1, status: "completed", requested: "2026-10-15T21:02:00.000Z",
		started: "2026-10-15T21:02:00.500Z", completed: "2026-10-15T21:12:30.000Z", text: "Migrate the docs; run the link check in the background.",
		reply: "A background agent checks the links; a delegated task migrates the docs."})
	r.subagent(subSpec{id: "node:provider:claudeAgent:native-item:task%3Aac1d42bf0362bfc4c", thread: t, run: run1, providerThread: pt,
		origin: "provider_native", status: "running", title: "Link check", prompt: "Check every link in docs/.",
		started: "2026-10-15T21:02:40.846Z", updated: "2026-10-15T21:12:06.049Z"})
	// The delegated task's own thread, which finished.
	c, cpt, cps := ChildThread, "provider-thread:9c2e4b17:child", "provider-session:9c2e4b17:child"
	r.thread(c, "Migrate docs to the new layout", cpt, "2026-10-15T21:02:41.000Z", "2026-10-15T21:18:21.737Z")
	r.providerSession(cps, c, "ready", "2026-10-15T21:18:21.737Z")
	r.providerThread(cpt, c, cps, "idle", 1, 1, "2026-10-15T21:18:21.737Z")
	r.run(runSpec{thread: c, providerThread: cpt, ordinal: 1, status: "completed", requested: "2026-10-15T21:02:41.000Z",
		started: "2026-10-15T21:02:41.200Z", completed: "2026-10-15T21:18:21.737Z", text: "Move docs/ to the new layout.",
		reply: "Docs migrated: 14 pages moved, 3 redirects added, the site builds."})
	r.subagent(subSpec{id: "node:app:delegated-task:9c2e4b17:1", thread: t, run: run1, providerThread: cpt, child: c,
		origin: "app_owned", status: "running", title: "Docs migration", prompt: "Move docs/ to the new layout.",
		started: "2026-10-15T21:02:41.000Z", updated: "2026-10-15T21:12:06.049Z"})
	r.run(runSpec{thread: t, providerThread: pt, ordinal: 2, status: "completed", requested: "2026-10-15T22:50:00.000Z",
		started: "2026-10-15T22:50:00.300Z", completed: "2026-10-15T22:51:00.000Z", text: "Are the links fine?", reply: "Still checking."})
	return r.err
}
