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
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/permission"
	"github.com/vigilrun/vigil/store"
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
		{method: "POST", path: sess + "/agents/{agent}/cancel", handler: h(s.cancelRun)},
		{method: "POST", path: sess + "/agents/{agent}/retry", handler: h(s.retryAgent)},
		{method: "POST", path: sess + "/budget", handler: h(s.setBudget)},
		{method: "POST", path: sess + "/agents/{agent}/close", handler: h(s.closeAgent)},
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

// inspect runs fn on the session's state and writes what it returns, with
// status. fn runs on the session's goroutine; its result is encoded there.
func (s *Server) inspect(w http.ResponseWriter, r *http.Request, session string, status int, fn func(st *core.State) (any, error)) error {
	var b []byte
	var ferr error
	err := s.rt.Inspect(r.Context(), session, func(st *core.State) {
		v, err := fn(st)
		if err != nil {
			ferr = err
			return
		}
		b, ferr = marshal(v)
	})
	if err != nil {
		return err
	}
	if ferr != nil {
		return ferr
	}
	writeRaw(w, status, b)
	return nil
}

// actionErr explains an action refused because the session does not run
// here: a session the store knows (closed, or owned by another node) is a
// conflict, not a missing session.
func (s *Server) actionErr(ctx context.Context, session string, err error) error {
	if !errors.Is(err, vigil.ErrNoSession) {
		return err
	}
	closed := false
	if ierr := s.rt.Inspect(ctx, session, func(st *core.State) { closed = st.Session.Closed }); ierr != nil {
		return err
	}
	if closed {
		return &apiError{status: http.StatusConflict, code: "closed", msg: "session " + session + " is closed"}
	}
	return &apiError{status: http.StatusConflict, code: "moved", msg: "session " + session + " is not running on this server (another node owns it)"}
}

func agentOf(st *core.State, ref string) (*core.Agent, error) {
	a := st.Agent(ref)
	if a == nil {
		return nil, notFound("no agent %q in session %s", ref, st.Session.ID)
	}
	return a, nil
}

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
	p := &store.SessionListParams{Owner: r.URL.Query().Get("owner")}
	if v := r.URL.Query().Get("open"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return badRequest("open=%q: want true or false", v)
		}
		p.Open = b
	}
	rows, err := s.rt.Sessions(r.Context(), p)
	if err != nil {
		return err
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
	p := vigil.SessionParams{
		Title: req.Title, Prompt: req.Prompt, Provider: req.Provider, Model: req.Model, SubagentModel: req.SubagentModel,
		Cwd: req.Cwd, Dirs: req.Dirs, Permissions: def.Permissions, Budget: budget,
	}
	if p.Title == "" {
		p.Title = firstLine(req.Prompt, 60)
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
	return s.inspect(w, r, string(sess.ID), http.StatusCreated, func(st *core.State) (any, error) { return sessionDetail(st), nil })
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) { return sessionDetail(st), nil })
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.CloseSession(r.Context(), id, by); err != nil {
		if err = s.actionErr(r.Context(), id, err); toAPIError(err).code != "closed" {
			return err
		}
		// Closed already: closing is idempotent.
	}
	return s.inspect(w, r, id, http.StatusOK, func(st *core.State) (any, error) { return sessionDetail(st), nil })
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		v := statusView(st)
		v.Isolation = isolationView(s.rt.Isolation())
		return v, nil
	})
}

func (s *Server) hold(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	var req HoldRequest
	if err := s.decode(w, r, &req, true); err != nil {
		return err
	}
	if err := s.rt.Hold(r.Context(), id, by, req.Reason); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.status(w, r)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.Resume(r.Context(), id, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.status(w, r)
}

func (s *Server) prompt(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	var req PromptRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" {
		return badRequest("text is empty")
	}
	item, err := s.rt.Prompt(r.Context(), id, req.Text, req.Priority)
	if err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	writeJSON(w, http.StatusAccepted, PromptResult{Session: core.SessionID(id), Item: item})
	return nil
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		return AgentList{Agents: agentViews(st)}, nil
	})
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		a, err := agentOf(st, r.PathValue("agent"))
		if err != nil {
			return nil, err
		}
		return agentDetail(st, a), nil
	})
}

// message sends a user message and answers with its outcome: joined,
// queued-behind-stop, resumed or rejected (a rejection is an outcome, not
// an HTTP error). It never waits on the target's model (DESIGN rule 11):
// when the target's model round is in flight the answer is 202 with the
// outcome pending and its promise in detail; that round's answer settles
// it (GET .../messages/{msg}, or the message.resolved event).
func (s *Server) message(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	var req MessageRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if strings.TrimSpace(req.Text) == "" {
		return badRequest("text is empty")
	}
	m, err := s.rt.Message(r.Context(), id, r.PathValue("agent"), req.Text, req.Priority)
	if err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	status := http.StatusOK
	if m.Outcome == core.OutcomePending {
		status = http.StatusAccepted
	}
	writeJSON(w, status, s.msgView(r.Context(), id, m))
	return nil
}

// MessageView is a message with the sentence its sender reads about its
// outcome (DESIGN rule 3).
type MessageView struct {
	core.Msg
	Detail string `json:"detail,omitempty"`
}

func (s *Server) msgView(ctx context.Context, session string, m *core.Msg) MessageView {
	v := MessageView{Msg: *m}
	_ = s.rt.Inspect(ctx, session, func(st *core.State) {
		if cur := st.Msgs[m.ID]; cur != nil {
			v.Detail = messageDetail(st, cur)
		}
	})
	return v
}

// messageDetail is the outcome's explanation, from the text the core gives
// a sending agent.
func messageDetail(st *core.State, m *core.Msg) string {
	var out struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal([]byte(core.RenderOutcome(st, m)), &out)
	return out.Detail
}

// transcript writes an agent's transcript as JSONL.
func (s *Server) transcript(w http.ResponseWriter, r *http.Request) error {
	id, agent := r.PathValue("session"), r.PathValue("agent")
	var buf bytes.Buffer
	if err := s.rt.Transcript(r.Context(), id, agent, &buf); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	_, err := buf.WriteTo(w)
	return err
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	id, agent := r.PathValue("session"), r.PathValue("agent")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.CancelRun(r.Context(), id, agent, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.agentViewOf(w, r, id, agent)
}

func (s *Server) retryAgent(w http.ResponseWriter, r *http.Request) error {
	id, agent := r.PathValue("session"), r.PathValue("agent")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.RetryAgent(r.Context(), id, agent, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.agentViewOf(w, r, id, agent)
}

// setBudget replaces the session's budget, or an agent tree's, and answers
// with the budget and what its scope used; agents a spent budget blocked
// run again.
func (s *Server) setBudget(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	var req BudgetRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	budget, err := req.budget("")
	if err != nil {
		return err
	}
	if err := s.rt.SetBudget(r.Context(), id, req.Agent, budget, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	var v BudgetView
	err = s.rt.Inspect(r.Context(), id, func(st *core.State) {
		v.Budget, v.Agent = st.Session.Budget, req.Agent
		if main := st.Agents[core.MainAgent]; main != nil {
			v.Spent = main.Tree
		}
		if a := st.Agent(req.Agent); req.Agent != "" && a != nil {
			v.Budget, v.Spent, v.Agent = a.Budget, a.Tree, string(a.ID)
		}
	})
	if err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) closeAgent(w http.ResponseWriter, r *http.Request) error {
	id, agent := r.PathValue("session"), r.PathValue("agent")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.CloseAgent(r.Context(), id, agent, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.agentViewOf(w, r, id, agent)
}

func (s *Server) agentViewOf(w http.ResponseWriter, r *http.Request, id, agent string) error {
	return s.inspect(w, r, id, http.StatusOK, func(st *core.State) (any, error) {
		a, err := agentOf(st, agent)
		if err != nil {
			return nil, err
		}
		return agentView(st, a), nil
	})
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		a, err := agentFilter(st, r)
		if err != nil {
			return nil, err
		}
		return RunList{Runs: runs(st, a)}, nil
	})
}

// agentFilter returns the agent named by the ?agent= query, or nil for
// all agents.
func agentFilter(st *core.State, r *http.Request) (*core.Agent, error) {
	ref := r.URL.Query().Get("agent")
	if ref == "" {
		return nil, nil
	}
	return agentOf(st, ref)
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		return TaskList{Tasks: tasks(st)}, nil
	})
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		t := st.Tasks[core.TaskID(r.PathValue("task"))]
		if t == nil {
			return nil, notFound("no task %q in session %s", r.PathValue("task"), st.Session.ID)
		}
		return t, nil
	})
}

func (s *Server) taskOutput(w http.ResponseWriter, r *http.Request) error {
	id, task := r.PathValue("session"), r.PathValue("task")
	q := r.URL.Query()
	offset, limit := int64(0), int64(64<<10)
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("offset=%q: want a byte offset >= 0", v)
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > 1<<20 {
			return badRequest("limit=%q: want 1 to %d bytes", v, 1<<20)
		}
		limit = n
	}
	var status core.TaskStatus
	if err := s.rt.Inspect(r.Context(), id, func(st *core.State) {
		if t := st.Tasks[core.TaskID(task)]; t != nil {
			status = t.Status
		}
	}); err != nil {
		return err
	}
	data, next, err := s.rt.TaskOutput(r.Context(), id, task, offset, limit)
	if err != nil {
		return err
	}
	out := TaskOutput{Task: core.TaskID(task), Status: status, Offset: offset, Next: next, Data: string(data)}
	if !utf8.Valid(data) {
		out.Data, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) stopTask(w http.ResponseWriter, r *http.Request) error {
	id, task := r.PathValue("session"), r.PathValue("task")
	if err := s.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := s.rt.StopTask(r.Context(), id, task, by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.getTask(w, r)
}

func (s *Server) listInbox(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		a, err := agentFilter(st, r)
		if err != nil {
			return nil, err
		}
		return InboxList{Items: inbox(st, a)}, nil
	})
}

func (s *Server) cancelItem(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	if err := s.rt.CancelItem(r.Context(), id, r.PathValue("item"), by); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) moveItem(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
	var req MoveRequest
	if err := s.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Index == nil {
		return badRequest("index is required")
	}
	if err := s.rt.MoveItem(r.Context(), id, r.PathValue("item"), *req.Index); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	return s.inspect(w, r, id, http.StatusOK, func(st *core.State) (any, error) { return InboxList{Items: inbox(st, nil)}, nil })
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		return MessageList{Messages: messages(st)}, nil
	})
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		m := st.Msgs[core.MsgID(r.PathValue("msg"))]
		if m == nil {
			return nil, notFound("no message %q in session %s", r.PathValue("msg"), st.Session.ID)
		}
		return MessageView{Msg: *m, Detail: messageDetail(st, m)}, nil
	})
}

func (s *Server) listNotes(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		return NoteList{Notifications: notes(st)}, nil
	})
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	return s.inspect(w, r, r.PathValue("session"), http.StatusOK, func(st *core.State) (any, error) {
		return ApprovalList{Approvals: approvals(st)}, nil
	})
}

func (s *Server) answerApproval(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session")
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
	var rule, cwd string
	if req.Save {
		if s.opts.Defaults.SaveRule == nil {
			return badRequest("this server keeps no project rules: answer always without save")
		}
		var rerr error
		if err := s.rt.Inspect(r.Context(), id, func(st *core.State) {
			p := st.Approvals[core.ApprovalID(r.PathValue("approval"))]
			if p == nil {
				rerr = &core.Error{Code: core.CodeNotFound, Message: "no pending permission request " + r.PathValue("approval")}
				return
			}
			cwd = st.Session.Cwd
			rule, rerr = permission.RuleFor(p.Tool, p.Input)
		}); err != nil {
			return s.actionErr(r.Context(), id, err)
		}
		if rerr != nil {
			return s.actionErr(r.Context(), id, rerr)
		}
		if cwd == "" {
			return badRequest("the session has no working directory to save the rule for")
		}
	}
	answer := func() error {
		if req.Always {
			return s.rt.AnswerApprovalAlways(r.Context(), id, r.PathValue("approval"), by)
		}
		return s.rt.AnswerApproval(r.Context(), id, r.PathValue("approval"), *req.Allow, by, req.Reason)
	}
	if err := answer(); err != nil {
		return s.actionErr(r.Context(), id, err)
	}
	if req.Save {
		if err := s.opts.Defaults.SaveRule(cwd, rule); err != nil {
			return fmt.Errorf("the request was allowed, but the rule %s was not saved: %w", rule, err)
		}
	}
	return s.listApprovals(w, r)
}

// firstLine returns s's first line, cut to n bytes at a rune boundary.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
