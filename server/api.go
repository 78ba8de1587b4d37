package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/internal/text"
)

// by is who the API records as the author of an action.
const by = "user"

// routes is every endpoint of the server.
func (s *Server) routes() []route {
	h := s.handle
	const sess = "/api/sessions/{session}"
	return []route{
		{method: "GET", path: "/healthz", public: true, handler: h(s.health)},
		{method: "GET", path: "/{$}", public: true, handler: http.HandlerFunc(s.uiIndex)},
		{method: "GET", path: "/ui/{path...}", public: true, handler: s.uiFiles()},
		{method: "GET", path: "/metrics", handler: s.metrics.handler()},
		{method: "GET", path: "/api/openapi.json", handler: h(s.openAPI)},
		{method: "GET", path: "/api/events", handler: h(s.eventsAll)},
		{method: "GET", path: "/api/sessions", handler: h(s.listSessions)},
		{method: "POST", path: "/api/sessions", handler: h(s.createSession)},
		{method: "GET", path: sess, handler: h(s.getSession)},
		{method: "POST", path: sess + "/close", handler: h(s.closeSession)},
		{method: "GET", path: sess + "/events", handler: h(s.eventsSession)},
		{method: "GET", path: sess + "/status", handler: h(s.status)},
		{method: "POST", path: sess + "/hold", handler: h(s.hold)},
		{method: "POST", path: sess + "/resume", handler: h(s.resume)},
		{method: "POST", path: sess + "/prompts", handler: h(s.prompt)},
		{method: "GET", path: sess + "/agents", handler: h(s.listAgents)},
		{method: "GET", path: sess + "/agents/{agent}", handler: h(s.getAgent)},
		{method: "GET", path: sess + "/agents/{agent}/transcript", handler: h(s.transcript)},
		{method: "POST", path: sess + "/agents/{agent}/messages", handler: h(s.message)},
		{method: "POST", path: sess + "/agents/{agent}/cancel", handler: h(s.agentAction(s.rt.CancelRun))},
		{method: "POST", path: sess + "/agents/{agent}/retry", handler: h(s.agentAction(s.rt.RetryAgent))},
		{method: "POST", path: sess + "/budget", handler: h(s.setBudget)},
		{method: "POST", path: sess + "/permissions", handler: h(s.setPermissionMode)},
		{method: "POST", path: sess + "/agents/{agent}/close", handler: h(s.agentAction(s.rt.CloseAgent))},
		{method: "GET", path: sess + "/runs", handler: h(s.listRuns)},
		{method: "GET", path: sess + "/tasks", handler: h(s.listTasks)},
		{method: "GET", path: sess + "/tasks/{task}", handler: h(s.getTask)},
		{method: "GET", path: sess + "/tasks/{task}/output", handler: h(s.taskOutput)},
		{method: "POST", path: sess + "/tasks/{task}/stop", handler: h(s.stopTask)},
		{method: "GET", path: sess + "/inbox", handler: h(s.listInbox)},
		{method: "DELETE", path: sess + "/inbox/{item}", handler: h(s.cancelItem)},
		{method: "POST", path: sess + "/inbox/{item}/move", handler: h(s.moveItem)},
		{method: "GET", path: sess + "/messages", handler: h(s.listMessages)},
		{method: "GET", path: sess + "/messages/{msg}", handler: h(s.getMessage)},
		{method: "GET", path: sess + "/notifications", handler: h(s.listNotes)},
		{method: "GET", path: sess + "/approvals", handler: h(s.listApprovals)},
		{method: "POST", path: sess + "/approvals/{approval}", handler: h(s.answerApproval)},
		{method: "GET", path: "/api/nodes", handler: h(s.nodes)},
		{method: "POST", path: "/api/internal/call", handler: http.HandlerFunc(s.peerCall)},
		{method: "GET", path: "/mcp", handler: http.HandlerFunc(s.mcp)},
		{method: "POST", path: "/mcp", handler: http.HandlerFunc(s.mcp)},
		{method: "DELETE", path: "/mcp", handler: http.HandlerFunc(s.mcp)},
	}
}

// mcp serves the MCP tools over streamable HTTP (Options.MCP). The body
// is read first, bounded like any other (Options.MaxBody, ReadTimeout),
// and its text checked like any other; the response is a stream, bounded
// per write (Options.StreamWriteTimeout), as a wait may hold it for long.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request) {
	if s.opts.MCP == nil {
		writeError(w, notFound("MCP is not enabled on this server"))
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		b, err := s.readBody(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		if json.Valid(b) {
			if e := checkJSONText(b); e != nil {
				writeError(w, e)
				return
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	sw := newStreamWriter(w, s.opts.StreamWriteTimeout)
	defer sw.extend()
	if s.routeMCP(sw, r) {
		return // held by another node: sent on to it
	}
	s.opts.MCP.ServeHTTP(sw, r)
}

// handle adapts a handler that returns an error; the error is written as
// JSON unless the response has started.
func (s *Server) handle(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			e := toAPIError(err)
			if e.status >= 500 && e.status != http.StatusServiceUnavailable && e.status != http.StatusGatewayTimeout {
				s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, e)
		}
	})
}

// sid is the session named by the path.
func sid(r *http.Request) vigil.SessionID { return vigil.SessionID(r.PathValue("session")) }

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-s.stopping:
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "shutting down"})
	default:
		writeJSON(w, http.StatusOK, Health{Status: "ok"})
	}
	return nil
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	if s.spec == nil {
		return errors.New("openapi document unavailable")
	}
	writeRaw(w, http.StatusOK, s.spec)
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	p := &vigil.SessionListParams{Owner: r.URL.Query().Get("owner")}
	if v := r.URL.Query().Get("open"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("open=%q: want true or false", v)
		}
		p.Open = b
	}
	needsYou := false
	if v := r.URL.Query().Get("needs_you"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("needs_you=%q: want 1 or 0", v)
		}
		needsYou = b
	}
	rows, err := s.rt.SessionList(r.Context(), p)
	if err != nil {
		return err
	}
	if needsYou {
		rows = slices.DeleteFunc(rows, func(r vigil.SessionSummary) bool { return len(r.NeedsYou) == 0 })
	}
	writeJSON(w, http.StatusOK, SessionList{Sessions: nonNil(rows)})
	return nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req CreateSessionRequest
	if err := s.decode(w, r, &req, true); err != nil {
		return err
	}
	// A relative directory would be resolved against the server's working
	// directory, which the client does not know.
	if req.Cwd != "" && !filepath.IsAbs(req.Cwd) {
		return badRequest("cwd must be absolute: %q", req.Cwd)
	}
	for i, d := range req.Dirs {
		if !filepath.IsAbs(d) {
			return badRequest("dirs[%d] must be absolute: %q", i, d)
		}
	}
	budget, err := req.Budget.budget("budget.")
	if err != nil {
		return err
	}
	def := s.opts.Defaults
	p := &vigil.SessionParams{
		Title: req.Title, Prompt: req.Prompt, MaxRounds: req.MaxRounds, Provider: req.Provider, Model: req.Model, SubagentModel: req.SubagentModel,
		Cwd: req.Cwd, Dirs: req.Dirs, Permissions: def.Permissions, Budget: budget,
	}
	if p.Title == "" {
		p.Title = text.FirstLine(req.Prompt, 60)
	}
	if p.Model == "" && (p.Provider == "" || p.Provider == def.Provider) {
		p.Model = def.Model
		if p.SubagentModel == "" {
			p.SubagentModel = def.SubagentModel
		}
	}
	if req.Permissions != nil {
		p.Permissions = *req.Permissions
	}
	if def.ProjectRules != nil && p.Cwd != "" {
		p.Permissions.Allow = append(slices.Clone(p.Permissions.Allow), def.ProjectRules(filepath.Clean(p.Cwd))...)
	}
	sess, err := s.rt.CreateSession(r.Context(), p)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/sessions/"+string(sess.ID))
	return s.writeSession(w, r, sess.ID, http.StatusCreated)
}

// writeSession answers with the session's detail.
func (s *Server) writeSession(w http.ResponseWriter, r *http.Request, id vigil.SessionID, status int) error {
	d, err := s.rt.SessionGet(r.Context(), id, nil)
	if err != nil {
		return err
	}
	writeJSON(w, status, d)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	return s.writeSession(w, r, sid(r), http.StatusOK)
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) error {
	id := sid(r)
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	// Closing a closed session is no error: closing is idempotent.
	if err := s.rt.CloseSession(r.Context(), id, by); err != nil && !errors.Is(err, vigil.ErrSessionClosed) {
		return err
	}
	return s.writeSession(w, r, id, http.StatusOK)
}

// StatusView is a session's status and how this node confines and
// contains what the session's agents run.
type StatusView struct {
	vigil.Status
	Isolation IsolationView `json:"isolation"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	st, err := s.rt.SessionStatus(r.Context(), sid(r))
	if err != nil {
		return err
	}
	st.Inboxes, st.Progress = nonNil(st.Inboxes), nonNil(st.Progress)
	writeJSON(w, http.StatusOK, StatusView{Status: *st, Isolation: isolationView(s.rt.Isolation())})
	return nil
}

func (s *Server) hold(w http.ResponseWriter, r *http.Request) error {
	var req HoldRequest
	if err := s.decode(w, r, &req, true); err != nil {
		return err
	}
	if err := s.rt.Hold(r.Context(), sid(r), &vigil.HoldParams{By: by, Reason: req.Reason}); err != nil {
		return err
	}
	return s.status(w, r)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.Resume(r.Context(), sid(r), by); err != nil {
		return err
	}
	return s.status(w, r)
}

func (s *Server) prompt(w http.ResponseWriter, r *http.Request) error {
	var req PromptRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" {
		return badRequest("text is empty")
	}
	item, err := s.rt.Prompt(r.Context(), sid(r), &vigil.PromptParams{Text: req.Text, Priority: req.Priority, MaxRounds: req.MaxRounds})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, PromptResult{Session: sid(r), Item: item})
	return nil
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, AgentList{Agents: d.Agents})
	return nil
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) error {
	a, err := s.rt.AgentGet(r.Context(), sid(r), r.PathValue("agent"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// message sends a user message and answers with its outcome: joined,
// queued-behind-stop, resumed or rejected (a rejection is an outcome, not
// an HTTP error). It never waits on the target's model (DESIGN rule 11):
// when the target's model round is in flight the answer is 202 with the
// outcome pending and its promise in detail; that round's answer settles
// it (GET .../messages/{msg}, or the message.resolved event).
func (s *Server) message(w http.ResponseWriter, r *http.Request) error {
	var req MessageRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" {
		return badRequest("text is empty")
	}
	m, err := s.rt.Message(r.Context(), sid(r), &vigil.MessageParams{To: r.PathValue("agent"), Text: req.Text, Priority: req.Priority})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if m.Outcome == "pending" {
		status = http.StatusAccepted
	}
	writeJSON(w, status, m)
	return nil
}

// transcript writes an agent's transcript as JSONL.
func (s *Server) transcript(w http.ResponseWriter, r *http.Request) error {
	var buf bytes.Buffer
	if err := s.rt.Transcript(r.Context(), &buf, &vigil.TranscriptParams{Session: sid(r), Agent: r.PathValue("agent")}); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	_, err := buf.WriteTo(w)
	return err
}

// agentAction runs an action on the agent of the path and answers with
// the agent.
func (s *Server) agentAction(act func(ctx context.Context, id vigil.SessionID, p *vigil.AgentActionParams) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.decode(w, r, &struct{}{}, true); err != nil {
			return err
		}
		agent := r.PathValue("agent")
		if err := act(r.Context(), sid(r), &vigil.AgentActionParams{Agent: agent, By: by}); err != nil {
			return err
		}
		a, err := s.rt.AgentGet(r.Context(), sid(r), agent)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, a.Agent)
		return nil
	}
}

// setBudget replaces the session's budget, or an agent tree's, and answers
// with the budget and what its scope used; agents a spent budget blocked
// run again.
func (s *Server) setBudget(w http.ResponseWriter, r *http.Request) error {
	id := sid(r)
	var req BudgetRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	budget, err := req.budget("")
	if err != nil {
		return err
	}
	if err := s.rt.SetBudget(r.Context(), id, &vigil.SetBudgetParams{Agent: req.Agent, Budget: budget, By: by}); err != nil {
		return err
	}
	v := BudgetView{}
	if req.Agent == "" {
		d, err := s.rt.SessionGet(r.Context(), id, nil)
		if err != nil {
			return err
		}
		v.Budget, v.Spent = d.Session.Budget, d.Spent
	} else {
		a, err := s.rt.AgentGet(r.Context(), id, req.Agent)
		if err != nil {
			return err
		}
		v.Agent, v.Budget, v.Spent = string(a.ID), a.Budget, a.Tree
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// setPermissionMode changes the session's permission mode and answers
// with its permissions; pending requests the mode decides are answered.
func (s *Server) setPermissionMode(w http.ResponseWriter, r *http.Request) error {
	id := sid(r)
	var req PermissionModeRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Mode == "" {
		return badRequest("mode is required (ask, accept-edits, auto or bypass)")
	}
	if err := s.rt.SetPermissionMode(r.Context(), id, &vigil.SetPermissionModeParams{Mode: vigil.PermissionMode(req.Mode), By: by}); err != nil {
		return err
	}
	d, err := s.rt.SessionGet(r.Context(), id, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d.Session.Permissions)
	return nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	runs, err := s.rt.RunList(r.Context(), sid(r), r.URL.Query().Get("agent"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, RunList{Runs: nonNil(runs)})
	return nil
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, TaskList{Tasks: d.Tasks})
	return nil
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), nil)
	if err != nil {
		return err
	}
	for _, t := range d.Tasks {
		if t.ID == vigil.TaskID(r.PathValue("task")) {
			writeJSON(w, http.StatusOK, t)
			return nil
		}
	}
	return notFound("no task %q in session %s", r.PathValue("task"), sid(r))
}

func (s *Server) taskOutput(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := &vigil.TaskOutputParams{Task: vigil.TaskID(r.PathValue("task")), Limit: 64 << 10}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("offset=%q: want a byte offset >= 0", v)
		}
		p.Offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<20 {
			return badRequest("limit=%q: want 1 to %d bytes", v, 1<<20)
		}
		p.Limit = n
	}
	chunk, err := s.rt.TaskOutput(r.Context(), sid(r), p)
	if err != nil {
		return err
	}
	out := TaskOutput{Task: chunk.Task, Status: chunk.Status, Offset: chunk.Offset, Next: chunk.Next, Data: string(chunk.Data)}
	if !utf8.Valid(chunk.Data) {
		out.Data, out.Encoding = base64.StdEncoding.EncodeToString(chunk.Data), "base64"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) stopTask(w http.ResponseWriter, r *http.Request) error {
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.StopTask(r.Context(), sid(r), &vigil.StopTaskParams{Task: vigil.TaskID(r.PathValue("task")), By: by}); err != nil {
		return err
	}
	return s.getTask(w, r)
}

func (s *Server) listInbox(w http.ResponseWriter, r *http.Request) error {
	items, err := s.rt.InboxList(r.Context(), sid(r), r.URL.Query().Get("agent"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, InboxList{Items: nonNil(items)})
	return nil
}

func (s *Server) cancelItem(w http.ResponseWriter, r *http.Request) error {
	if err := s.rt.CancelItem(r.Context(), sid(r), &vigil.CancelItemParams{Item: vigil.ItemID(r.PathValue("item")), By: by}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) moveItem(w http.ResponseWriter, r *http.Request) error {
	var req MoveRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Index == nil {
		return badRequest("index is required")
	}
	if err := s.rt.MoveItem(r.Context(), sid(r), &vigil.MoveItemParams{Item: vigil.ItemID(r.PathValue("item")), Index: *req.Index}); err != nil {
		return err
	}
	r.URL.RawQuery = "" // every agent's inbox
	return s.listInbox(w, r)
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), &vigil.SessionGetParams{Messages: true})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, MessageList{Messages: nonNil(d.Messages)})
	return nil
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), &vigil.SessionGetParams{Messages: true})
	if err != nil {
		return err
	}
	for _, m := range d.Messages {
		if m.ID == vigil.MessageID(r.PathValue("msg")) {
			writeJSON(w, http.StatusOK, m)
			return nil
		}
	}
	return notFound("no message %q in session %s", r.PathValue("msg"), sid(r))
}

func (s *Server) listNotes(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), &vigil.SessionGetParams{Notifications: true})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, NoteList{Notifications: nonNil(d.Notifications)})
	return nil
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	d, err := s.rt.SessionGet(r.Context(), sid(r), nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ApprovalList{Approvals: d.Approvals})
	return nil
}

func (s *Server) answerApproval(w http.ResponseWriter, r *http.Request) error {
	id, approval := sid(r), vigil.ApprovalID(r.PathValue("approval"))
	var req ApprovalRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Allow == nil {
		return badRequest("allow is required (true or false)")
	}
	if req.Always && !*req.Allow {
		return badRequest("always goes with allow: true")
	}
	if req.Save && !req.Always {
		return badRequest("save goes with always: true")
	}
	if len(req.Input) > 0 && !*req.Allow {
		return badRequest("input goes with allow: true")
	}
	if len(req.Input) > 0 && req.Save {
		return badRequest("save keeps the rule of the model's own call: answer with input without save")
	}
	var rule, cwd string
	if req.Save {
		if s.opts.Defaults.SaveRule == nil {
			return badRequest("this server keeps no project rules: answer always without save")
		}
		d, err := s.rt.SessionGet(r.Context(), id, nil)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(d.Approvals, func(p vigil.Approval) bool { return p.ID == approval })
		if i < 0 {
			return notFound("no pending permission request %s", approval)
		}
		if rule, cwd = d.Approvals[i].AlwaysRule, d.Session.Cwd; rule == "" {
			return badRequest("no rule can allow this call always")
		}
		if cwd == "" {
			return badRequest("the session has no working directory to save the rule for")
		}
	}
	p := &vigil.AnswerApprovalParams{Approval: approval, Allow: *req.Allow, Always: req.Always, By: by, Reason: req.Reason, Input: req.Input}
	if err := s.rt.AnswerApproval(r.Context(), id, p); err != nil {
		return err
	}
	if req.Save {
		if err := s.opts.Defaults.SaveRule(cwd, rule); err != nil {
			return fmt.Errorf("the request was allowed, but the rule %s was not saved: %w", rule, err)
		}
	}
	return s.listApprovals(w, r)
}
