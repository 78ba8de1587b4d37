// Package t3code finds, in T3 Code's state database (statev2.sqlite), the
// failures of seed report 002 and its relatives:
//
//   - held-continuation: a wake run (a run T3 made to continue background
//     work: its payload has workStartedAt or restartContinuationOfRunId, or
//     its user message carries a notification or a delegated completion)
//     that sits in orchestration_v2_projection_runs with status queued and
//     queueHeld true. Nothing but a person resumes a held queue, and the
//     Claude adapter's continuation entry stays set while the run waits, so
//     the thread's later wake turns are never recorded; the finding counts
//     the runs and events recorded after the held run and says whether any
//     of them was a wake run.
//   - stuck-subagent: a row of orchestration_v2_projection_subagents still
//     pending, running or waiting, with no completed_at, although its
//     process is gone (the provider session of its provider thread is
//     stopped or in error, or the provider thread is closed or in error) or
//     its completion is gone (its own child thread has runs and none of
//     them is live any more). The child thread's last assistant message is
//     recovered for the user.
//
// The schema is T3 Code's own, read from the public repository
// pingdotgg/t3code: migration 050_OrchestrationV2.ts at commit
// 9e3929026b698489509600e0d8227cc4421dc554, and its steps
// OrchestrationV2/Subagents.ts and OrchestrationV2/Foundation.ts at commit
// 7ac31254b0867392444f31fbba1ba4d1ac78e6e6; run and subagent payloads follow
// packages/contracts/src/orchestrationV2.ts (OrchestrationV2Run,
// OrchestrationV2Subagent, OrchestrationV2ConversationMessage) at commit
// a84d72a88671cd74b7149d72f04f08b62ccabbda. t3test builds test databases
// with that schema.
//
// The database is opened read-only (SQLite's mode=ro, and immutable=1 when
// no write-ahead log is beside it, so not even a -shm file is made); the
// tests check that the file is unchanged.
package t3code

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/vigilrun/vigil/internal/doctor"
)

// DefaultPath returns where T3 Code keeps its state database: in the
// state directory userdata of its base directory ($T3CODE_HOME, else ~/.t3),
// statev2.sqlite. T3's apps/server/src/config.ts derives the state
// directory as baseDir/userdata; releases with orchestration V2 (0.0.46 on)
// name the database statev2.sqlite, which they seed once from the V1
// state.sqlite, whose schema has no orchestration_v2 tables. getenv reads
// the environment; home is the user's home directory.
func DefaultPath(getenv func(string) string, home string) string {
	base := getenv("T3CODE_HOME")
	if base == "" {
		base = filepath.Join(home, ".t3")
	}
	return filepath.Join(base, "userdata", "statev2.sqlite")
}

// Options tunes a scan; the zero value is the defaults.
type Options struct{}

// Run statuses of a live run (OrchestrationV2RunStatus).
var liveRun = []string{"preparing", "queued", "starting", "running", "waiting"}

// Subagent statuses of live work (isOrchestrationV2WorkActive).
var liveWork = []string{"pending", "running", "waiting"}

// Scan reads the database at path and reports what it finds.
func Scan(ctx context.Context, path string, _ Options) (doctor.Report, error) {
	rep := doctor.Report{Read: []string{path}}
	db, err := openReadOnly(path)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	tables, err := tableNames(ctx, db)
	if err != nil {
		return rep, fmt.Errorf("read %s: %w", path, err)
	}
	for _, t := range []string{"orchestration_v2_projection_runs", "orchestration_v2_projection_subagents"} {
		if !tables[t] {
			return rep, fmt.Errorf("read %s: no table %s (not a T3 Code statev2.sqlite of orchestration V2)", path, t)
		}
	}
	d := &dbState{path: path, tables: tables}
	if err := d.load(ctx, db); err != nil {
		return rep, fmt.Errorf("read %s: %w", path, err)
	}
	rep.Sessions = len(d.threadIDs)
	rep.Findings = append(rep.Findings, d.held()...)
	rep.Findings = append(rep.Findings, d.stuck()...)
	rep.Warnings = append(rep.Warnings, d.warnings...)
	rep.Sort()
	return rep, nil
}

// openReadOnly opens a SQLite file so that nothing can be written to it.
func openReadOnly(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open T3 Code database %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("open T3 Code database: %w", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("open T3 Code database %s: is a directory", path)
	}
	q := url.Values{"mode": {"ro"}}
	if _, err := os.Stat(abs + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
	}
	db := sql.OpenDB(roConnector{dsn: (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()})
	db.SetMaxOpenConns(1)
	return db, nil
}

// roConnector opens read-only connections of modernc.org/sqlite's driver.
type roConnector struct{ dsn string }

// Connect implements driver.Connector.
func (c roConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := (&msqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	if ex, ok := conn.(driver.ExecerContext); ok {
		if _, err := ex.ExecContext(ctx, "PRAGMA query_only = 1", nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("query_only: %w", err)
		}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (c roConnector) Driver() driver.Driver { return &msqlite.Driver{} }

func tableNames(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

// runPayload is what the checks read of an OrchestrationV2Run.
type runPayload struct {
	UserMessageID              string `json:"userMessageId"`
	QueueHeld                  bool   `json:"queueHeld"`
	QueuePosition              *int   `json:"queuePosition"`
	StartedAt                  string `json:"startedAt"`
	WorkStartedAt              string `json:"workStartedAt"`
	RestartContinuationOfRunID string `json:"restartContinuationOfRunId"`
}

type run struct {
	id, thread, status, requested, completed string
	ordinal                                  int
	raw                                      string
	p                                        runPayload
}

type message struct {
	id, thread, runID, role, created string
	raw                              string
	p                                struct {
		Text                string          `json:"text"`
		Notification        json.RawMessage `json:"notification"`
		DelegatedCompletion json.RawMessage `json:"delegatedCompletion"`
	}
}

type subagent struct {
	id, thread, runID, providerThread, childThread, origin, status string
	started, completed, updated                                    string
	raw                                                            string
	p                                                              struct {
		Title  *string `json:"title"`
		Prompt string  `json:"prompt"`
		Result *string `json:"result"`
	}
}

type event struct {
	seq                    int64
	thread, typ, at, runID string
}

type provThread struct{ id, session, status, updated string }
type provSession struct{ id, status, updated string }

// dbState is what one scan loaded.
type dbState struct {
	path      string
	tables    map[string]bool
	threadIDs []string
	titles    map[string]string
	runs      map[string][]*run // by thread, in ordinal order
	messages  map[string]*message
	byThread  map[string][]*message // in created order
	events    map[string][]event    // by thread, in sequence order
	subagents []*subagent
	pthreads  map[string]provThread
	psessions map[string]provSession
	warnings  []string
}

func (d *dbState) load(ctx context.Context, db *sql.DB) error {
	d.titles, d.runs, d.messages, d.byThread = map[string]string{}, map[string][]*run{}, map[string]*message{}, map[string][]*message{}
	d.events, d.pthreads, d.psessions = map[string][]event{}, map[string]provThread{}, map[string]provSession{}
	seen := map[string]bool{}
	addThread := func(id string) {
		if !seen[id] {
			seen[id] = true
			d.threadIDs = append(d.threadIDs, id)
		}
	}
	if d.tables["orchestration_v2_projection_threads"] {
		err := each(ctx, db, `SELECT thread_id, title FROM orchestration_v2_projection_threads WHERE deleted_at IS NULL ORDER BY created_at, thread_id`, func(rows *sql.Rows) error {
			var id, title string
			if err := rows.Scan(&id, &title); err != nil {
				return err
			}
			d.titles[id] = title
			addThread(id)
			return nil
		})
		if err != nil {
			return fmt.Errorf("threads: %w", err)
		}
	}
	err := each(ctx, db, `SELECT run_id, thread_id, ordinal, status, requested_at, COALESCE(completed_at, ''), payload_json
		FROM orchestration_v2_projection_runs ORDER BY thread_id, ordinal`, func(rows *sql.Rows) error {
		r := &run{}
		if err := rows.Scan(&r.id, &r.thread, &r.ordinal, &r.status, &r.requested, &r.completed, &r.raw); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(r.raw), &r.p); err != nil {
			d.warnings = append(d.warnings, fmt.Sprintf("%s: run %s: payload_json: %v", d.path, r.id, err))
		}
		d.runs[r.thread] = append(d.runs[r.thread], r)
		addThread(r.thread)
		return nil
	})
	if err != nil {
		return fmt.Errorf("runs: %w", err)
	}
	if d.tables["orchestration_v2_projection_messages"] {
		err := each(ctx, db, `SELECT message_id, thread_id, COALESCE(run_id, ''), role, created_at, payload_json
			FROM orchestration_v2_projection_messages ORDER BY thread_id, created_at, message_id`, func(rows *sql.Rows) error {
			m := &message{}
			if err := rows.Scan(&m.id, &m.thread, &m.runID, &m.role, &m.created, &m.raw); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(m.raw), &m.p); err != nil {
				d.warnings = append(d.warnings, fmt.Sprintf("%s: message %s: payload_json: %v", d.path, m.id, err))
			}
			d.messages[m.id] = m
			d.byThread[m.thread] = append(d.byThread[m.thread], m)
			return nil
		})
		if err != nil {
			return fmt.Errorf("messages: %w", err)
		}
	}
	if d.tables["orchestration_v2_events"] {
		err := each(ctx, db, `SELECT sequence, thread_id, event_type, occurred_at, COALESCE(run_id, '') FROM orchestration_v2_events ORDER BY sequence`, func(rows *sql.Rows) error {
			var e event
			if err := rows.Scan(&e.seq, &e.thread, &e.typ, &e.at, &e.runID); err != nil {
				return err
			}
			d.events[e.thread] = append(d.events[e.thread], e)
			return nil
		})
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	err = each(ctx, db, `SELECT subagent_id, thread_id, COALESCE(run_id, ''), COALESCE(provider_thread_id, ''), COALESCE(child_thread_id, ''),
		origin, status, COALESCE(started_at, ''), COALESCE(completed_at, ''), updated_at, payload_json
		FROM orchestration_v2_projection_subagents ORDER BY thread_id, started_at, subagent_id`, func(rows *sql.Rows) error {
		s := &subagent{}
		if err := rows.Scan(&s.id, &s.thread, &s.runID, &s.providerThread, &s.childThread, &s.origin, &s.status, &s.started, &s.completed, &s.updated, &s.raw); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(s.raw), &s.p); err != nil {
			d.warnings = append(d.warnings, fmt.Sprintf("%s: subagent %s: payload_json: %v", d.path, s.id, err))
		}
		d.subagents = append(d.subagents, s)
		return nil
	})
	if err != nil {
		return fmt.Errorf("subagents: %w", err)
	}
	if d.tables["orchestration_v2_projection_provider_threads"] {
		err := each(ctx, db, `SELECT provider_thread_id, COALESCE(provider_session_id, ''), status, updated_at FROM orchestration_v2_projection_provider_threads`, func(rows *sql.Rows) error {
			var p provThread
			if err := rows.Scan(&p.id, &p.session, &p.status, &p.updated); err != nil {
				return err
			}
			d.pthreads[p.id] = p
			return nil
		})
		if err != nil {
			return fmt.Errorf("provider threads: %w", err)
		}
	}
	if d.tables["orchestration_v2_projection_provider_sessions"] {
		err := each(ctx, db, `SELECT provider_session_id, status, updated_at FROM orchestration_v2_projection_provider_sessions`, func(rows *sql.Rows) error {
			var p provSession
			if err := rows.Scan(&p.id, &p.status, &p.updated); err != nil {
				return err
			}
			d.psessions[p.id] = p
			return nil
		})
		if err != nil {
			return fmt.Errorf("provider sessions: %w", err)
		}
	}
	return nil
}

func each(ctx context.Context, db *sql.DB, q string, f func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// isWake reports whether T3 made the run to continue background work
// rather than for a prompt a person sent.
func (d *dbState) isWake(r *run) bool {
	if r.p.WorkStartedAt != "" || r.p.RestartContinuationOfRunID != "" {
		return true
	}
	if m := d.messages[r.p.UserMessageID]; m != nil {
		return len(m.p.Notification) > 0 && string(m.p.Notification) != "null" ||
			len(m.p.DelegatedCompletion) > 0 && string(m.p.DelegatedCompletion) != "null"
	}
	return false
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func (d *dbState) runEvidence(r *run, why string) doctor.Evidence {
	at := parseTime(r.requested)
	if c := parseTime(r.completed); !c.IsZero() {
		at = c
	}
	return doctor.Evidence{
		File: d.path, Row: "orchestration_v2_projection_runs run_id=" + r.id, At: at, Why: why,
		Text: shorten(fmt.Sprintf("ordinal %d status %s requested_at %s completed_at %s payload_json %s", r.ordinal, r.status, r.requested, orNull(r.completed), r.raw), 300),
	}
}

func orNull(s string) string {
	if s == "" {
		return "NULL"
	}
	return s
}

func (d *dbState) runText(r *run) string {
	if m := d.messages[r.p.UserMessageID]; m != nil {
		return m.p.Text
	}
	return ""
}

func (d *dbState) finding(k doctor.Kind, thread string, start time.Time) doctor.Finding {
	return doctor.Finding{Kind: k, Source: "t3code", Session: thread, File: d.path, Start: start}
}

// lastActivity is the newest time the database records for a thread.
func (d *dbState) lastActivity(thread string) time.Time {
	var last time.Time
	bump := func(s string) {
		if t := parseTime(s); t.After(last) {
			last = t
		}
	}
	for _, r := range d.runs[thread] {
		bump(r.requested)
		bump(r.completed)
	}
	for _, e := range d.events[thread] {
		bump(e.at)
	}
	for _, s := range d.subagents {
		if s.thread == thread {
			bump(s.updated)
		}
	}
	return last
}

// held reports queued wake runs held in their thread's queue.
func (d *dbState) held() []doctor.Finding {
	var out []doctor.Finding
	for _, thread := range d.threadIDs {
		runs := d.runs[thread]
		for i, r := range runs {
			if r.status != "queued" || !r.p.QueueHeld || !d.isWake(r) {
				continue
			}
			start := parseTime(r.requested)
			f := d.finding(doctor.HeldContinuation, thread, start)
			f.Item = r.id
			var prev *run
			for _, p := range runs[:i] {
				if d.isWake(p) {
					prev = p
				}
			}
			if prev != nil {
				f.Evidence = append(f.Evidence, d.runEvidence(prev, fmt.Sprintf("the last wake run before it (run %d, %s)", prev.ordinal, prev.status)))
			}
			f.Evidence = append(f.Evidence, d.runEvidence(r, fmt.Sprintf("wake run %d is queued with queueHeld: true; no user will resume it", r.ordinal)))
			var later, laterWakes int
			for _, l := range runs[i+1:] {
				later++
				if d.isWake(l) {
					laterWakes++
				}
			}
			if later > 0 {
				first, last := runs[i+1], runs[len(runs)-1]
				f.Evidence = append(f.Evidence, d.runEvidence(first, fmt.Sprintf("the first of %d later run(s), started around the held one", later)))
				if last != first {
					f.Evidence = append(f.Evidence, d.runEvidence(last, "the last run recorded"))
				}
			}
			var after []event
			for _, e := range d.events[thread] {
				if parseTime(e.at).After(start) {
					after = append(after, e)
				}
			}
			runEvents := 0
			for _, e := range after {
				if strings.HasPrefix(e.typ, "run.") {
					runEvents++
				}
			}
			if n := len(after); n > 0 {
				f.Evidence = append(f.Evidence, doctor.Evidence{
					File: d.path, Row: fmt.Sprintf("orchestration_v2_events sequence %d..%d", after[0].seq, after[n-1].seq), At: parseTime(after[n-1].at),
					Text: eventSummary(after), Why: fmt.Sprintf("%d event(s) recorded for the thread after the held run, %d of them about runs", n, runEvents),
				})
			}
			if end := d.lastActivity(thread); end.After(start) {
				f.Stall = end.Sub(start)
			}
			what := fmt.Sprintf("%q", shorten(d.runText(r), 80))
			if d.runText(r) == "" {
				what = "(its message is not in the database)"
			}
			f.Summary = fmt.Sprintf("wake run %d %s has been queued with queueHeld since %s", r.ordinal, what, r.requested)
			if laterWakes == 0 {
				f.Summary += fmt.Sprintf("; %d later run(s) started around it and none was a wake run: the thread's wake turns stopped being recorded after it", later)
			} else {
				f.Summary += fmt.Sprintf("; %d later run(s) started around it, %d of them wake runs", later, laterWakes)
			}
			f.Action = fmt.Sprintf("cancel the held continuation %s from the thread's queue (t3_queue_cancel over MCP, or the queue UI); the adapter's continuation entry is per process, so a restart of the thread's Claude process lets wakes through again", r.id)
			out = append(out, f)
		}
	}
	return out
}

func eventSummary(evs []event) string {
	count := map[string]int{}
	var order []string
	for _, e := range evs {
		if count[e.typ] == 0 {
			order = append(order, e.typ)
		}
		count[e.typ]++
	}
	parts := make([]string, 0, len(order))
	for _, t := range order {
		parts = append(parts, fmt.Sprintf("%s ×%d", t, count[t]))
	}
	return fmt.Sprintf("%s .. %s: %s", evs[0].at, evs[len(evs)-1].at, strings.Join(parts, ", "))
}

// stuck reports subagents left live after their process or completion is
// gone.
func (d *dbState) stuck() []doctor.Finding {
	var out []doctor.Finding
	for _, s := range d.subagents {
		if !slices.Contains(liveWork, s.status) || s.completed != "" {
			continue
		}
		subEv := doctor.Evidence{
			File: d.path, Row: "orchestration_v2_projection_subagents subagent_id=" + s.id, At: parseTime(s.updated),
			Text: shorten(fmt.Sprintf("status %s origin %s started_at %s completed_at NULL updated_at %s child_thread_id %s payload_json %s", s.status, s.origin, orNull(s.started), s.updated, orNull(s.childThread), s.raw), 300),
			Why:  fmt.Sprintf("the subagent still reads %s, last updated %s", s.status, s.updated),
		}
		var why string
		var ev []doctor.Evidence
		var recovered string
		pt, hasPT := d.pthreads[s.providerThread]
		ps, hasPS := d.psessions[pt.session]
		switch {
		case hasPT && hasPS && (ps.status == "stopped" || ps.status == "error"):
			why = fmt.Sprintf("its provider session %s is %s (since %s): the process that ran it is gone", ps.id, ps.status, ps.updated)
			ev = append(ev, doctor.Evidence{File: d.path, Row: "orchestration_v2_projection_provider_sessions provider_session_id=" + ps.id, At: parseTime(ps.updated),
				Text: fmt.Sprintf("status %s updated_at %s", ps.status, ps.updated), Why: "the subagent's provider process ended"})
		case hasPT && (pt.status == "closed" || pt.status == "error"):
			why = fmt.Sprintf("its provider thread %s is %s (since %s)", pt.id, pt.status, pt.updated)
			ev = append(ev, doctor.Evidence{File: d.path, Row: "orchestration_v2_projection_provider_threads provider_thread_id=" + pt.id, At: parseTime(pt.updated),
				Text: fmt.Sprintf("status %s updated_at %s", pt.status, pt.updated), Why: "the subagent's provider thread ended"})
		case s.childThread != "" && len(d.runs[s.childThread]) > 0 && !d.anyLive(s.childThread):
			runs := d.runs[s.childThread]
			last := runs[len(runs)-1]
			why = fmt.Sprintf("its own thread %s has no live run: its last run ended %s at %s, and the end never reached this row", s.childThread, last.status, orNull(last.completed))
			ev = append(ev, d.runEvidence(last, "the child thread's last run ended"))
			recovered = d.lastAssistant(s.childThread)
		default:
			continue
		}
		f := d.finding(doctor.StuckSubagent, s.thread, parseTime(s.updated))
		if end := d.lastActivity(s.thread); end.After(f.Start) {
			f.Stall = end.Sub(f.Start)
		}
		f.Item = s.id
		title := s.id
		if s.p.Title != nil && *s.p.Title != "" {
			title = fmt.Sprintf("%q (%s)", *s.p.Title, s.id)
		}
		f.Summary = fmt.Sprintf("subagent %s still reads %s, but %s", title, s.status, why)
		f.Evidence = append([]doctor.Evidence{subEv}, ev...)
		if recovered == "" && s.p.Result != nil {
			recovered = *s.p.Result
		}
		f.Recovered = recovered
		f.Action = "restart the T3 Code server: its startup recovery ends subagents whose native work is gone (needsRecovery(\"runtime\")); the thread then stops waiting on it"
		out = append(out, f)
	}
	return out
}

func (d *dbState) anyLive(thread string) bool {
	for _, r := range d.runs[thread] {
		if slices.Contains(liveRun, r.status) {
			return true
		}
	}
	return false
}

func (d *dbState) lastAssistant(thread string) string {
	msgs := d.byThread[thread]
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].role == "assistant" && msgs[i].p.Text != "" {
			return msgs[i].p.Text
		}
	}
	return ""
}
