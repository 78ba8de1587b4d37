package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vigilrun/vigil/store"
)

// The projection rows of an append, converted for storage (times as unix
// nanoseconds, NULL for the zero time) in the caller's goroutine, before
// the append is queued.
type (
	sessionVals struct {
		id, title, owner, provider, model, cwd string
		closed                                 bool
		created, updated                       *int64
		lastSeq, in, out                       int64
		needsYou                               string
	}
	agentVals struct {
		session, id, name, owner, task, state string
		runs, inbox, in, out                  int64
	}
	runVals struct {
		session, agent string
		seq            int64
		kind, status   string
		started, ended *int64
		reply, errText string
		in, out        int64
	}
	taskVals struct {
		session, id, kind, owner, agent, status, command string
		started, ended, exit                             *int64
	}
	itemVals struct {
		session, id, agent, kind, priority, sender string
		enqueued                                   *int64
	}
	itemKey  struct{ session, id string }
	noteVals struct {
		session, task           string
		run                     int64
		owner, status, delivery string
		deliveredRun            int64
		dropped                 string
		written                 *int64
		isNew                   bool
		index                   int // among the append's notes
		key                     string
	}
)

// prepared is an append's projection, ready to stage. refused, when set,
// is why the database would refuse it (text it cannot hold); the writer
// reports it after the fence and sequence checks.
type prepared struct {
	session *sessionVals
	agents  []agentVals
	runs    []runVals
	tasks   []taskVals
	items   []itemVals
	gone    []itemKey
	notes   []noteVals
	refused error
}

// textCheck remembers the first text a PostgreSQL text column refuses: a
// NUL byte or invalid UTF-8.
type textCheck struct{ err error }

func (c *textCheck) check(what, s string) string {
	if c.err == nil {
		if strings.IndexByte(s, 0) >= 0 {
			c.err = fmt.Errorf("%s holds a NUL byte: %w", what, store.ErrRefused)
		} else if !utf8.ValidString(s) {
			c.err = fmt.Errorf("%s is not valid UTF-8: %w", what, store.ErrRefused)
		}
	}
	return s
}

// prepare converts a projection for storage; its error is a time out of
// the storable range.
func prepare(session string, pr *store.Projection) (*prepared, error) {
	out := &prepared{}
	if pr == nil {
		return out, nil
	}
	var e enc
	var c textCheck
	if r := pr.Session; r != nil {
		out.session = &sessionVals{id: c.check("session id", session), title: c.check("session title", r.Title),
			owner: c.check("session owner", r.Owner), provider: c.check("session provider", r.Provider),
			model: c.check("session model", r.Model), cwd: c.check("session cwd", r.Cwd), closed: r.Closed,
			created: e.time(r.Created), updated: e.time(r.Updated), lastSeq: r.LastSeq, in: r.InputTokens, out: r.OutputTokens,
			needsYou: e.lines(r.NeedsYou)}
	}
	for _, a := range pr.Agents {
		out.agents = append(out.agents, agentVals{session: session, id: c.check("agent id", a.ID), name: c.check("agent name", a.Name),
			owner: c.check("agent owner", a.Owner), task: c.check("agent task", a.Task), state: c.check("agent state", a.State),
			runs: int64(a.Runs), inbox: int64(a.Inbox), in: a.InputTokens, out: a.OutputTokens})
	}
	for _, r := range pr.Runs {
		out.runs = append(out.runs, runVals{session: session, agent: c.check("run agent", r.Agent), seq: int64(r.Seq),
			kind: c.check("run kind", r.Kind), status: c.check("run status", r.Status), started: e.time(r.Started),
			ended: e.time(r.Ended), reply: c.check("run reply", r.Reply), errText: c.check("run error", r.Error),
			in: r.InputTokens, out: r.OutputTokens})
	}
	for _, t := range pr.Tasks {
		var exit *int64
		if t.Exit != nil {
			code := int64(*t.Exit)
			exit = &code
		}
		out.tasks = append(out.tasks, taskVals{session: session, id: c.check("task id", t.ID), kind: c.check("task kind", t.Kind),
			owner: c.check("task owner", t.Owner), agent: c.check("task agent", t.Agent), status: c.check("task status", t.Status),
			command: c.check("task command", t.Command), started: e.time(t.Started), ended: e.time(t.Ended), exit: exit})
	}
	for _, it := range pr.Items {
		out.items = append(out.items, itemVals{session: session, id: c.check("item id", it.ID), agent: c.check("item agent", it.Agent),
			kind: c.check("item kind", it.Kind), priority: c.check("item priority", it.Priority), sender: c.check("item sender", it.From),
			enqueued: e.time(it.Enqueued)})
	}
	for _, id := range pr.ItemsGone {
		out.gone = append(out.gone, itemKey{session: session, id: c.check("item id", id)})
	}
	for i, n := range pr.Notes {
		out.notes = append(out.notes, noteVals{session: session, task: c.check("note task", n.Task), run: int64(n.Run),
			owner: c.check("note owner", n.Owner), status: c.check("note status", n.Status), delivery: c.check("note delivery", n.Delivery),
			deliveredRun: int64(n.DeliveredRun), dropped: c.check("note dropped", n.Dropped), written: e.time(n.Written),
			isNew: n.New, index: i, key: n.Key()})
	}
	if e.err != nil {
		return nil, e.err
	}
	out.refused = c.err
	return out, nil
}

// keyed holds rows by key in the order their keys were first put; a later
// row of a key replaces the earlier one (rows are complete).
type keyed[R any] struct {
	rows []R
	dead []bool
	at   map[string]int
}

func (k *keyed[R]) put(key string, r R) {
	if i, ok := k.at[key]; ok && !k.dead[i] {
		k.rows[i] = r
		return
	}
	if k.at == nil {
		k.at = map[string]int{}
	}
	k.at[key] = len(k.rows)
	k.rows = append(k.rows, r)
	k.dead = append(k.dead, false)
}

func (k *keyed[R]) get(key string) *R {
	if i, ok := k.at[key]; ok && !k.dead[i] {
		return &k.rows[i]
	}
	return nil
}

func (k *keyed[R]) remove(key string) {
	if i, ok := k.at[key]; ok {
		k.dead[i] = true
		delete(k.at, key)
	}
}

func (k *keyed[R]) each(fn func(r *R)) {
	for i := range k.rows {
		if !k.dead[i] {
			fn(&k.rows[i])
		}
	}
}

func (k *keyed[R]) len() int { return len(k.at) }

// noteOps are a group's writes of one notification key, as one statement
// each can do them: pre (the last update before the first insert; it
// changes a row that existed), first (the first insert: a no-op when the
// key exists), post (the last update after it, or of a key never
// inserted). Any later insert of the key is a duplicate, whatever the
// database holds.
type noteOps struct {
	pre, first, post *noteVals
	firstJob         *job
}

// group is what the accepted appends of one transaction write.
type group struct {
	jobs    []*job // the accepted ones, in queue order
	offs    []int64
	last    map[string]int64 // session -> last seq, from the database then the staged steps
	total   int64            // records staged
	appends int64
	rows    int64            // rows written, from the statements' command tags
	tables  map[string]int64 // the rows written, by table
	base    int64            // the global before the group's first

	sessions keyed[sessionVals]
	agents   keyed[agentVals]
	runs     keyed[runVals]
	tasks    keyed[taskVals]
	items    keyed[itemVals]
	gone     keyed[itemKey] // items that left their inbox: deleted
	notes    keyed[*noteOps]
}

func newGroup() *group { return &group{last: map[string]int64{}, tables: map[string]int64{}} }

// count counts n rows written to table.
func (g *group) count(table string, n int64) {
	g.rows += n
	g.tables[table] += n
}

// check runs an append's fence and sequence checks against the database
// (epochs, lasts) and the appends accepted before it in the group.
func (g *group) check(j *job, epochs, lasts map[string]int64) error {
	p := j.p
	epoch := epochs[p.Session]
	if epoch == 0 {
		return fmt.Errorf("no lease on the session: %w", store.ErrFenced)
	}
	if epoch != p.Epoch {
		return fmt.Errorf("epoch %d, lease epoch %d: %w", p.Epoch, epoch, store.ErrFenced)
	}
	last, ok := g.last[p.Session]
	if !ok {
		last = lasts[p.Session]
	}
	for i, r := range p.Records {
		if r.Seq != last+int64(i)+1 {
			return fmt.Errorf("seq %d after %d: %w", r.Seq, last+int64(i), store.ErrConflict)
		}
	}
	return j.prep.refused
}

// stage adds an accepted append to the group.
func (g *group) stage(j *job) {
	p := j.p
	g.jobs = append(g.jobs, j)
	g.offs = append(g.offs, g.total)
	g.appends++
	if n := len(p.Records); n > 0 {
		g.total += int64(n)
		g.last[p.Session] = p.Records[n-1].Seq
	}
	pr := j.prep
	if r := pr.session; r != nil {
		g.sessions.put(r.id, *r)
	}
	for _, a := range pr.agents {
		g.agents.put(a.session+"\x00"+a.id, a)
	}
	for _, r := range pr.runs {
		g.runs.put(r.session+"\x00"+r.agent+"\x00"+strconv.FormatInt(r.seq, 10), r)
	}
	for _, t := range pr.tasks {
		g.tasks.put(t.session+"\x00"+t.id, t)
	}
	for _, it := range pr.items {
		g.items.put(it.session+"\x00"+it.id, it)
	}
	for _, k := range pr.gone {
		key := k.session + "\x00" + k.id
		g.items.remove(key) // staged by an earlier append of the group
		g.gone.put(key, k)
	}
	for i := range pr.notes {
		n := &pr.notes[i]
		key := n.session + "\x00" + n.task + "\x00" + strconv.FormatInt(n.run, 10)
		ops := g.notes.get(key)
		if ops == nil {
			g.notes.put(key, &noteOps{})
			ops = g.notes.get(key)
		}
		switch o := *ops; {
		case n.isNew && o.first == nil:
			o.first, o.firstJob = n, j
			if o.post != nil {
				o.pre, o.post = o.post, nil
			}
		case n.isNew:
			j.dups = append(j.dups, dupNote{n.index, n.key})
		default:
			o.post = n
		}
	}
}

// Multi-row statements: one per table and group, the rows passed as one
// array per column and unnested. An upsert leaves a row that would not
// change alone.

type column struct{ name, typ string }

func upsertSQL(table string, keys int, cols []column) string {
	names, params, sets, old, news := make([]string, len(cols)), make([]string, len(cols)), []string{}, []string{}, []string{}
	for i, c := range cols {
		names[i] = c.name
		params[i] = fmt.Sprintf("$%d::%s[]", i+1, c.typ)
		if i >= keys {
			sets = append(sets, c.name+" = excluded."+c.name)
			old = append(old, table+"."+c.name)
			news = append(news, "excluded."+c.name)
		}
	}
	return "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") SELECT * FROM unnest(" + strings.Join(params, ", ") + ")" +
		" ON CONFLICT (" + strings.Join(names[:keys], ", ") + ") DO UPDATE SET " + strings.Join(sets, ", ") +
		" WHERE (" + strings.Join(old, ", ") + ") IS DISTINCT FROM (" + strings.Join(news, ", ") + ")"
}

func updateSQL(table string, keys int, cols []column) string {
	names, params, sets, where, old, news := make([]string, len(cols)), make([]string, len(cols)), []string{}, []string{}, []string{}, []string{}
	for i, c := range cols {
		names[i] = c.name
		params[i] = fmt.Sprintf("$%d::%s[]", i+1, c.typ)
		if i < keys {
			where = append(where, table+"."+c.name+" = r."+c.name)
		} else {
			sets = append(sets, c.name+" = r."+c.name)
			old = append(old, table+"."+c.name)
			news = append(news, "r."+c.name)
		}
	}
	return "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " FROM unnest(" + strings.Join(params, ", ") + ") AS r (" +
		strings.Join(names, ", ") + ") WHERE " + strings.Join(where, " AND ") +
		" AND (" + strings.Join(old, ", ") + ") IS DISTINCT FROM (" + strings.Join(news, ", ") + ")"
}

func cols(spec ...string) []column {
	out := make([]column, 0, len(spec)/2)
	for i := 0; i < len(spec); i += 2 {
		out = append(out, column{spec[i], spec[i+1]})
	}
	return out
}

var (
	sessionColumns = cols("id", "text", "title", "text", "owner", "text", "provider", "text", "model", "text", "cwd", "text",
		"closed", "bool", "created", "bigint", "updated", "bigint", "last_seq", "bigint", "input_tokens", "bigint", "output_tokens", "bigint", "needs_you", "text")
	agentCols = cols("session", "text", "id", "text", "name", "text", "owner", "text", "task", "text", "state", "text",
		"runs", "bigint", "inbox", "bigint", "input_tokens", "bigint", "output_tokens", "bigint")
	runCols = cols("session", "text", "agent", "text", "seq", "bigint", "kind", "text", "status", "text", "started", "bigint",
		"ended", "bigint", "reply", "text", "error", "text", "input_tokens", "bigint", "output_tokens", "bigint")
	taskCols = cols("session", "text", "id", "text", "kind", "text", "owner", "text", "agent", "text", "status", "text",
		"command", "text", "started", "bigint", "ended", "bigint", "exit_code", "bigint")
	itemCols = cols("session", "text", "id", "text", "agent", "text", "kind", "text", "priority", "text", "sender", "text",
		"enqueued", "bigint")
	noteCols = cols("session", "text", "task", "text", "run", "bigint", "owner", "text", "status", "text", "delivery", "text",
		"delivered_run", "bigint", "dropped", "text", "written", "bigint")

	upsertSessions = upsertSQL("sessions", 1, sessionColumns)
	upsertAgents   = upsertSQL("agents", 2, agentCols)
	upsertRuns     = upsertSQL("runs", 3, runCols)
	upsertTasks    = upsertSQL("tasks", 2, taskCols)
	upsertItems    = upsertSQL("items", 2, itemCols)
	deleteItems    = "DELETE FROM items USING unnest($1::text[], $2::text[]) AS r (session, id) WHERE items.session = r.session AND items.id = r.id"
	updateNotes    = updateSQL("notes", 3, noteCols)
	insertNotes    = "INSERT INTO notes (session, task, run, owner, status, delivery, delivered_run, dropped, written) " +
		"SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::bigint[]) " +
		"ON CONFLICT (session, task, run) DO NOTHING RETURNING session, task, run"
	// insertSteps takes the group's globals from event_counter and inserts
	// its steps; it returns the global before the group's first. It is the
	// group's last statement before the notification and COMMIT, in the
	// same batch: the counter row stays locked until the commit, and only
	// while the server runs the batch's end.
	insertSteps = `WITH c AS (UPDATE event_counter SET last = last + $1::bigint RETURNING last - $1::bigint AS base),
		ins AS (INSERT INTO steps (session, seq, last, global, glast, data)
			SELECT r.session, r.seq, r.last, c.base + r.off + 1, c.base + r.off + (r.last - r.seq) + 1, r.data
			FROM c, unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[]) AS r (session, seq, last, off, data))
		SELECT base FROM c`
)

// noteArgs returns the columns of notes.
func noteArgs(ns []*noteVals) []any {
	s, task, run, owner, status, delivery, dr, dropped, written := make([]string, len(ns)), make([]string, len(ns)), make([]int64, len(ns)),
		make([]string, len(ns)), make([]string, len(ns)), make([]string, len(ns)), make([]int64, len(ns)), make([]string, len(ns)), make([]*int64, len(ns))
	for i, n := range ns {
		s[i], task[i], run[i], owner[i], status[i], delivery[i], dr[i], dropped[i], written[i] =
			n.session, n.task, n.run, n.owner, n.status, n.delivery, n.deliveredRun, n.dropped, n.written
	}
	return []any{s, task, run, owner, status, delivery, dr, dropped, written}
}

// result is how a queued statement's result is read.
type result func(br pgx.BatchResults) error

// flush sends the group's statements and COMMIT in one round trip and
// reads their results: committed is false when the server answered
// COMMIT with ROLLBACK. An error matching errUnknownOutcome means the
// connection was lost while the batch was under way, or at COMMIT, so
// the transaction may have committed. Any other error means it did not:
// the server refused a statement and skipped the rest of the batch,
// COMMIT included (the transaction is aborted and must be rolled back),
// or refused the COMMIT itself, or the batch was never sent.
func (g *group) flush(ctx context.Context, conn *pgx.Conn) (committed bool, err error) {
	b := &pgx.Batch{}
	var reads []result
	exec := func(what, table string) result {
		return func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			g.count(table, tag.RowsAffected())
			return nil
		}
	}
	if n := g.sessions.len(); n > 0 {
		id, title, owner, provider, model, cwd := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		closed, created, updated, last, in, out := make([]bool, 0, n), make([]*int64, 0, n), make([]*int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		needs := make([]string, 0, n)
		g.sessions.each(func(r *sessionVals) {
			id, title, owner, provider, model, cwd = append(id, r.id), append(title, r.title), append(owner, r.owner), append(provider, r.provider), append(model, r.model), append(cwd, r.cwd)
			closed, created, updated, last, in, out = append(closed, r.closed), append(created, r.created), append(updated, r.updated), append(last, r.lastSeq), append(in, r.in), append(out, r.out)
			needs = append(needs, r.needsYou)
		})
		b.Queue(upsertSessions, id, title, owner, provider, model, cwd, closed, created, updated, last, in, out, needs)
		reads = append(reads, exec("upsert sessions", "sessions"))
	}
	if n := g.agents.len(); n > 0 {
		s, id, name, owner, task, state := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		runs, inbox, in, out := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		g.agents.each(func(a *agentVals) {
			s, id, name, owner, task, state = append(s, a.session), append(id, a.id), append(name, a.name), append(owner, a.owner), append(task, a.task), append(state, a.state)
			runs, inbox, in, out = append(runs, a.runs), append(inbox, a.inbox), append(in, a.in), append(out, a.out)
		})
		b.Queue(upsertAgents, s, id, name, owner, task, state, runs, inbox, in, out)
		reads = append(reads, exec("upsert agents", "agents"))
	}
	if n := g.runs.len(); n > 0 {
		s, agent, kind, status, reply, errs := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		seq, in, out, started, ended := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]*int64, 0, n), make([]*int64, 0, n)
		g.runs.each(func(r *runVals) {
			s, agent, seq, kind, status, started, ended = append(s, r.session), append(agent, r.agent), append(seq, r.seq), append(kind, r.kind), append(status, r.status), append(started, r.started), append(ended, r.ended)
			reply, errs, in, out = append(reply, r.reply), append(errs, r.errText), append(in, r.in), append(out, r.out)
		})
		b.Queue(upsertRuns, s, agent, seq, kind, status, started, ended, reply, errs, in, out)
		reads = append(reads, exec("upsert runs", "runs"))
	}
	if n := g.tasks.len(); n > 0 {
		s, id, kind, owner, agent, status, command := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		started, ended, exit := make([]*int64, 0, n), make([]*int64, 0, n), make([]*int64, 0, n)
		g.tasks.each(func(t *taskVals) {
			s, id, kind, owner, agent, status, command = append(s, t.session), append(id, t.id), append(kind, t.kind), append(owner, t.owner), append(agent, t.agent), append(status, t.status), append(command, t.command)
			started, ended, exit = append(started, t.started), append(ended, t.ended), append(exit, t.exit)
		})
		b.Queue(upsertTasks, s, id, kind, owner, agent, status, command, started, ended, exit)
		reads = append(reads, exec("upsert tasks", "tasks"))
	}
	if n := g.items.len(); n > 0 {
		s, id, agent, kind, priority, sender := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		enqueued := make([]*int64, 0, n)
		g.items.each(func(it *itemVals) {
			s, id, agent, kind, priority, sender = append(s, it.session), append(id, it.id), append(agent, it.agent), append(kind, it.kind), append(priority, it.priority), append(sender, it.sender)
			enqueued = append(enqueued, it.enqueued)
		})
		b.Queue(upsertItems, s, id, agent, kind, priority, sender, enqueued)
		reads = append(reads, exec("upsert items", "items"))
	}
	if n := g.gone.len(); n > 0 {
		s, id := make([]string, 0, n), make([]string, 0, n)
		g.gone.each(func(k *itemKey) { s, id = append(s, k.session), append(id, k.id) })
		b.Queue(deleteItems, s, id)
		reads = append(reads, exec("delete items", "items"))
	}
	var pre, inserts, post []*noteVals
	var owners []*job
	g.notes.each(func(o **noteOps) {
		if (*o).pre != nil {
			pre = append(pre, (*o).pre)
		}
		if (*o).first != nil {
			inserts = append(inserts, (*o).first)
			owners = append(owners, (*o).firstJob)
		}
		if (*o).post != nil {
			post = append(post, (*o).post)
		}
	})
	if len(pre) > 0 {
		b.Queue(updateNotes, noteArgs(pre)...)
		reads = append(reads, exec("update notes", "notes"))
	}
	if len(inserts) > 0 {
		b.Queue(insertNotes, noteArgs(inserts)...)
		reads = append(reads, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("insert notes: %w", err)
			}
			inserted := map[string]bool{}
			var session, task string
			var run int64
			tag, err := pgx.ForEachRow(rows, []any{&session, &task, &run}, func() error {
				inserted[session+"\x00"+task+"\x00"+strconv.FormatInt(run, 10)] = true
				return nil
			})
			if err != nil {
				return fmt.Errorf("insert notes: %w", err)
			}
			g.count("notes", tag.RowsAffected())
			for i, n := range inserts {
				if !inserted[n.session+"\x00"+n.task+"\x00"+strconv.FormatInt(n.run, 10)] {
					owners[i].dups = append(owners[i].dups, dupNote{n.index, n.key})
				}
			}
			return nil
		})
	}
	if len(post) > 0 {
		b.Queue(updateNotes, noteArgs(post)...)
		reads = append(reads, exec("update notes", "notes"))
	}
	if g.total > 0 {
		n := len(g.jobs)
		s, seq, last, off, data := make([]string, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([][]byte, 0, n)
		for i, j := range g.jobs {
			if rs := j.p.Records; len(rs) > 0 {
				s, seq, last, off, data = append(s, j.p.Session), append(seq, rs[0].Seq), append(last, rs[len(rs)-1].Seq), append(off, g.offs[i]), append(data, j.data)
			}
		}
		b.Queue(insertSteps, g.total, s, seq, last, off, data)
		reads = append(reads, func(br pgx.BatchResults) error {
			if err := br.QueryRow().Scan(&g.base); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return errors.New("insert steps: no event_counter row")
				}
				return fmt.Errorf("insert steps: %w", err)
			}
			g.count("steps", int64(len(s)))
			g.count("event_counter", 1)
			return nil
		})
	}
	if g.total > 0 {
		// Delivered at commit to every listener (Store.Watch), this
		// node's included.
		b.Queue(notifyEvents)
		reads = append(reads, func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("notify: %w", err)
			}
			return nil
		})
	}
	b.Queue("COMMIT")
	reads = append(reads, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		committed = tag.String() == "COMMIT"
		return nil
	})
	br := conn.SendBatch(ctx, b)
	for i, read := range reads {
		if err := read(br); err != nil {
			_ = br.Close()
			var pe *pgconn.PgError
			switch {
			case pgconn.SafeToRetry(err):
				// Never sent.
			case !errors.As(err, &pe):
				// Lost: the server may have run the batch to its end.
				err = fmt.Errorf("%w: %w", errUnknownOutcome, err)
			case i == len(reads)-1 && lost(err):
				// The session ended at COMMIT.
				err = fmt.Errorf("%w: %w", errUnknownOutcome, err)
			}
			return false, err
		}
	}
	if err := br.Close(); err != nil {
		return false, fmt.Errorf("%w: %w", errUnknownOutcome, err)
	}
	return committed, nil
}

// notifyEvents tells the listeners of every node that events were
// committed; a transaction's notifications are sent when it commits.
const notifyEvents = `SELECT pg_notify('vigil_events', '')`

// answer sets the results of a committed group's appends.
func (g *group) answer() {
	for i, j := range g.jobs {
		for k := range j.p.Records {
			j.res.Globals = append(j.res.Globals, g.base+g.offs[i]+int64(k)+1)
		}
		if len(j.dups) > 0 {
			slices.SortStableFunc(j.dups, func(a, b dupNote) int { return a.index - b.index })
			for _, d := range j.dups {
				j.res.DuplicateNotes = append(j.res.DuplicateNotes, d.key)
			}
		}
	}
}
