package sqlite

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/vigilrun/vigil/store"
)

// group is what the jobs of one transaction staged: their steps and
// projection rows, written at the end of the transaction in one multi-row
// statement per table, the rows of a key coalesced to the last one. A job
// runs its checks (fence, sequence) before it stages anything, so a refused
// job leaves nothing behind and needs no savepoint.
type group struct {
	next     int64            // the next global position; 0 until read
	last     map[string]int64 // session -> last seq staged in this group
	steps    [][]any          // glast, session, seq, last, data
	appends  int64
	rows     int64            // rows written by the jobs' own statements
	tables   map[string]int64 // the rows written, by table
	upserts  map[*table]*staged
	gone     staged // items that left their inbox: deleted
	notes    map[noteKey]*stagedNote
	noteKeys []noteKey
}

func newGroup() *group {
	return &group{last: map[string]int64{}, upserts: map[*table]*staged{}, notes: map[noteKey]*stagedNote{}, tables: map[string]int64{}}
}

// count counts n rows written to table.
func (g *group) count(table string, n int64) {
	g.rows += n
	g.tables[table] += n
}

// table is a projection table and its upsert.
type table struct {
	name   string
	cols   []string // key columns first
	keys   int
	update string // the ON CONFLICT action
}

// newTable returns a projection table whose upsert leaves a row that would
// not change alone (as PostgreSQL's does): a step often projects an
// entity it touched without changing its row (a task whose agent ran
// again), and a row left alone is not written, nor counted.
func newTable(name string, keys int, cols ...string) *table {
	sets := make([]string, 0, len(cols)-keys)
	old := make([]string, 0, len(cols)-keys)
	news := make([]string, 0, len(cols)-keys)
	for _, c := range cols[keys:] {
		sets = append(sets, c+" = excluded."+c)
		old = append(old, name+"."+c)
		news = append(news, "excluded."+c)
	}
	return &table{name: name, cols: cols, keys: keys,
		update: "ON CONFLICT (" + strings.Join(cols[:keys], ", ") + ") DO UPDATE SET " + strings.Join(sets, ", ") +
			" WHERE (" + strings.Join(old, ", ") + ") IS NOT (" + strings.Join(news, ", ") + ")"}
}

var (
	sessionsTable = newTable("sessions", 1, "id", "title", "owner", "provider", "model", "cwd", "closed", "created", "updated", "last_seq", "input_tokens", "output_tokens", "needs_you")
	agentsTable   = newTable("agents", 2, "session", "id", "name", "owner", "task", "state", "runs", "inbox", "input_tokens", "output_tokens")
	runsTable     = newTable("runs", 3, "session", "agent", "seq", "kind", "status", "started", "ended", "reply", "error", "input_tokens", "output_tokens")
	tasksTable    = newTable("tasks", 2, "session", "id", "kind", "owner", "agent", "status", "command", "started", "ended", "exit_code")
	itemsTable    = newTable("items", 2, "session", "id", "agent", "kind", "priority", "sender", "enqueued")
	// The tables in the order a group writes them.
	upsertTables = []*table{sessionsTable, agentsTable, runsTable, tasksTable, itemsTable}
)

// staged holds rows by key, in first-staged order; a later row of a key
// replaces the earlier.
type staged struct {
	order []string
	rows  map[string][]any
}

func (s *staged) put(key string, row []any) {
	if s.rows == nil {
		s.rows = map[string][]any{}
	}
	if _, ok := s.rows[key]; !ok {
		s.order = append(s.order, key)
	}
	s.rows[key] = row
}

// drop forgets key's row.
func (s *staged) drop(key string) {
	if _, ok := s.rows[key]; ok {
		delete(s.rows, key)
		s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	}
}

func (s *staged) list() [][]any {
	out := make([][]any, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.rows[k])
	}
	return out
}

func (g *group) table(t *table) *staged {
	s := g.upserts[t]
	if s == nil {
		s = &staged{}
		g.upserts[t] = s
	}
	return s
}

type noteKey struct {
	session, task string
	run           int
}

// stagedNote is a notification row of the group: inserted when isNew (a
// key that exists already is reported to res as a duplicate), updated
// otherwise.
type stagedNote struct {
	row   []any // session, task, run, owner, status, delivery, delivered_run, dropped, written
	isNew bool
	// updated is set when a later step of the group updated a new row.
	updated bool
	res     *store.AppendResult
}

// stage adds a step's projection to the group.
func (g *group) stage(session string, pr *store.Projection, res *store.AppendResult) error {
	var e enc
	if r := pr.Session; r != nil {
		g.table(sessionsTable).put(session, []any{session, r.Title, r.Owner, r.Provider, r.Model, r.Cwd, r.Closed,
			e.time(r.Created), e.time(r.Updated), r.LastSeq, r.InputTokens, r.OutputTokens, e.lines(r.NeedsYou)})
	}
	for _, a := range pr.Agents {
		g.table(agentsTable).put(session+"\x00"+a.ID, []any{session, a.ID, a.Name, a.Owner, a.Task, a.State, a.Runs, a.Inbox,
			a.InputTokens, a.OutputTokens})
	}
	for _, r := range pr.Runs {
		g.table(runsTable).put(fmt.Sprint(session, "\x00", r.Agent, "\x00", r.Seq), []any{session, r.Agent, r.Seq, r.Kind, r.Status,
			e.time(r.Started), e.time(r.Ended), r.Reply, r.Error, r.InputTokens, r.OutputTokens})
	}
	for _, t := range pr.Tasks {
		var exit any
		if t.Exit != nil {
			exit = *t.Exit
		}
		g.table(tasksTable).put(session+"\x00"+t.ID, []any{session, t.ID, t.Kind, t.Owner, t.Agent, t.Status, t.Command,
			e.time(t.Started), e.time(t.Ended), exit})
	}
	for _, it := range pr.Items {
		g.table(itemsTable).put(session+"\x00"+it.ID, []any{session, it.ID, it.Agent, it.Kind, it.Priority, it.From, e.time(it.Enqueued)})
	}
	for _, id := range pr.ItemsGone {
		key := session + "\x00" + id
		g.table(itemsTable).drop(key) // staged by an earlier job of the group
		g.gone.put(key, []any{session, id})
	}
	for _, n := range pr.Notes {
		k := noteKey{session, n.Task, n.Run}
		row := []any{session, n.Task, n.Run, n.Owner, n.Status, n.Delivery, n.DeliveredRun, n.Dropped, e.time(n.Written)}
		sn, ok := g.notes[k]
		switch {
		case n.New && ok:
			res.DuplicateNotes = append(res.DuplicateNotes, n.Key())
		case ok:
			sn.row, sn.updated = row, sn.updated || sn.isNew
		default:
			g.notes[k] = &stagedNote{row: row, isNew: n.New, res: res}
			g.noteKeys = append(g.noteKeys, k)
		}
	}
	return e.err
}

// rowsPerStatement bounds a multi-row statement (its variables stay well
// under SQLite's limit of 32766).
const rowsPerStatement = 128

// flush writes what the group staged.
func (w *writer) flush(g *group) error {
	if err := w.insertRows("steps", []string{"glast", "session", "seq", "last", "data"}, "", g.steps); err != nil {
		return fmt.Errorf("insert steps: %w", err)
	}
	for _, t := range upsertTables {
		s := g.upserts[t]
		if s == nil {
			continue
		}
		if err := w.insertRows(t.name, t.cols, t.update, s.list()); err != nil {
			return fmt.Errorf("upsert %s: %w", t.name, err)
		}
	}
	if err := w.deleteRows("items", []string{"session", "id"}, g.gone.list()); err != nil {
		return fmt.Errorf("delete items: %w", err)
	}
	var inserts, updates [][]any
	for _, k := range g.noteKeys {
		if n := g.notes[k]; n.isNew {
			inserts = append(inserts, n.row)
		} else {
			updates = append(updates, n.row)
		}
	}
	if len(inserts) > 0 {
		inserted := map[noteKey]bool{}
		for chunk := range slices.Chunk(inserts, rowsPerStatement) {
			q := valuesQuery("INSERT INTO notes (session, task, run, owner, status, delivery, delivered_run, dropped, written) VALUES ", 9, len(chunk)) +
				" ON CONFLICT (session, task, run) DO NOTHING RETURNING session, task, run"
			if err := w.query(q, flatten(chunk), func(rows *sql.Rows) error {
				var k noteKey
				if err := rows.Scan(&k.session, &k.task, &k.run); err != nil {
					return err
				}
				inserted[k] = true
				return nil
			}); err != nil {
				return fmt.Errorf("insert notes: %w", err)
			}
		}
		g.count("notes", int64(len(inserted)))
		for _, k := range g.noteKeys {
			n := g.notes[k]
			if !n.isNew || inserted[k] {
				continue
			}
			n.res.DuplicateNotes = append(n.res.DuplicateNotes, store.NoteRow{Task: k.task, Run: k.run}.Key())
			if n.updated {
				// A later step of the group updated the note that turned out
				// to exist: the update applies to the stored one.
				updates = append(updates, n.row)
			}
		}
	}
	if err := w.updateRows("notes", []string{"session", "task", "run"},
		[]string{"owner", "status", "delivery", "delivered_run", "dropped", "written"}, updates); err != nil {
		return fmt.Errorf("update notes: %w", err)
	}
	return nil
}

func flatten(rows [][]any) []any {
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	out := make([]any, 0, n)
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// valuesQuery is prefix followed by rows groups of cols placeholders.
func valuesQuery(prefix string, cols, rows int) string {
	one := "(" + strings.Repeat("?, ", cols-1) + "?)"
	var b strings.Builder
	b.Grow(len(prefix) + rows*(len(one)+2))
	b.WriteString(prefix)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	return b.String()
}

// insertRows inserts rows into name in statements of up to
// rowsPerStatement rows, with the conflict clause onConflict.
func (w *writer) insertRows(name string, cols []string, onConflict string, rows [][]any) error {
	prefix := "INSERT INTO " + name + " (" + strings.Join(cols, ", ") + ") VALUES "
	for chunk := range slices.Chunk(rows, rowsPerStatement) {
		q := w.cachedQuery(name, "insert", len(chunk), func() string { return valuesQuery(prefix, len(cols), len(chunk)) + " " + onConflict })
		if _, err := w.exec(q, flatten(chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// updateRows sets the columns set of name's rows found by the key columns
// keys, from rows of keys then set values, in statements of up to
// rowsPerStatement rows; a row whose values are those already is left
// alone.
func (w *writer) updateRows(name string, keys, set []string, rows [][]any) error {
	var sets, where, old, news []string
	for i, c := range set {
		sets = append(sets, fmt.Sprintf("%s = v.column%d", c, len(keys)+i+1))
		old = append(old, name+"."+c)
		news = append(news, fmt.Sprintf("v.column%d", len(keys)+i+1))
	}
	for i, c := range keys {
		where = append(where, fmt.Sprintf("%s.%s = v.column%d", name, c, i+1))
	}
	// A row that would not change is left alone.
	where = append(where, "("+strings.Join(old, ", ")+") IS NOT ("+strings.Join(news, ", ")+")")
	for chunk := range slices.Chunk(rows, rowsPerStatement) {
		q := w.cachedQuery(name, "update", len(chunk), func() string {
			return "UPDATE " + name + " SET " + strings.Join(sets, ", ") + " FROM (" +
				valuesQuery("VALUES ", len(keys)+len(set), len(chunk)) + ") AS v WHERE " + strings.Join(where, " AND ")
		})
		if _, err := w.exec(q, flatten(chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// deleteRows deletes name's rows found by the key columns keys, in
// statements of up to rowsPerStatement rows.
func (w *writer) deleteRows(name string, keys []string, rows [][]any) error {
	for chunk := range slices.Chunk(rows, rowsPerStatement) {
		q := w.cachedQuery(name, "delete", len(chunk), func() string {
			return "DELETE FROM " + name + " WHERE (" + strings.Join(keys, ", ") + ") IN (" + valuesQuery("VALUES ", len(keys), len(chunk)) + ")"
		})
		if _, err := w.exec(q, flatten(chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// cachedQuery returns the text of a multi-row statement, built once.
func (w *writer) cachedQuery(name, kind string, rows int, build func() string) string {
	k := queryKey{name, kind, rows}
	q, ok := w.queries[k]
	if !ok {
		q = build()
		w.queries[k] = q
	}
	return q
}

type queryKey struct {
	name, kind string
	rows       int
}
