package vigil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// PeerPath is where PeerHandler is served under a node's advertised
// address.
const PeerPath = "/api/internal/call"

// ForwardedHeader names the node a forwarded call comes from; a node never
// forwards a call that carries it again.
const ForwardedHeader = "Vigil-Forwarded"

// The calls one node forwards to another, by name.
const (
	callCreate         = "create_session"
	callPrompt         = "prompt"
	callMessage        = "message"
	callSpawn          = "spawn"
	callAck            = "ack"
	callHold           = "hold"
	callResume         = "resume"
	callCancelRun      = "cancel_run"
	callRetryAgent     = "retry_agent"
	callCloseAgent     = "close_agent"
	callStopTask       = "stop_task"
	callSetBudget      = "set_budget"
	callCancelItem     = "cancel_item"
	callMoveItem       = "move_item"
	callAnswerApproval = "answer_approval"
	callSetPermMode    = "set_permission_mode"
	callCloseSession   = "close_session"
	callSessionGet     = "session_get"
	callSessionStatus  = "session_status"
	callAgentGet       = "agent_get"
	callRunList        = "run_list"
	callInboxList      = "inbox_list"
	callTaskOutput     = "task_output"
	callWaitQuiescent  = "wait_quiescent"
)

// peerCall is a call forwarded to the node that runs its session.
type peerCall struct {
	Method  string          `json:"method"`
	Session SessionID       `json:"session,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// peerReply is its answer: a result, or an error of the runtime.
type peerReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *peerError      `json:"error,omitempty"`
}

type peerError struct {
	Code       ErrorCode `json:"code"`
	Message    string    `json:"message"`
	RetryAfter int64     `json:"retry_after_ms,omitempty"`
}

// peerMethod runs a forwarded call here.
type peerMethod func(ctx context.Context, session SessionID, params json.RawMessage) (any, error)

// local is a call's body on the node that runs the session.
type local[P, R any] func(ctx context.Context, session SessionID, p P) (R, error)

func method[P, R any](f local[P, R]) peerMethod {
	return func(ctx context.Context, session SessionID, params json.RawMessage) (any, error) {
		var p P
		if len(params) > 0 {
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, invalidf("forwarded call: bad parameters: %v", err)
			}
		}
		return f(ctx, session, p)
	}
}

// errOnly adapts a call that returns only an error.
func errOnly[P any](f func(ctx context.Context, session SessionID, p P) error) local[P, struct{}] {
	return func(ctx context.Context, session SessionID, p P) (struct{}, error) {
		return struct{}{}, f(ctx, session, p)
	}
}

// spawned is Spawn's two results, for the wire.
type spawned struct {
	Agent AgentID `json:"agent"`
	Task  TaskID  `json:"task"`
}

func (r *Runtime) spawnCall(ctx context.Context, session SessionID, p *SpawnParams) (spawned, error) {
	a, t, err := r.spawn(ctx, session, p)
	return spawned{a, t}, err
}

func (r *Runtime) sessionStatusCall(ctx context.Context, session SessionID, _ struct{}) (*Status, error) {
	return r.sessionStatus(ctx, session)
}

func (r *Runtime) waitQuiescentCall(ctx context.Context, session SessionID, _ struct{}) (struct{}, error) {
	return struct{}{}, r.waitQuiescent(ctx, session)
}

func (r *Runtime) createCall(ctx context.Context, _ SessionID, p *SessionParams) (*Session, error) {
	return r.createSession(ctx, p)
}

// peerMethods are the calls PeerHandler serves.
func (r *Runtime) peerMethods() map[string]peerMethod {
	return map[string]peerMethod{
		callCreate:         method(r.createCall),
		callPrompt:         method(r.prompt),
		callMessage:        method(r.message),
		callSpawn:          method(r.spawnCall),
		callAck:            method(errOnly(r.ack)),
		callHold:           method(errOnly(r.hold)),
		callResume:         method(errOnly(r.resume)),
		callCancelRun:      method(errOnly(r.cancelRun)),
		callRetryAgent:     method(errOnly(r.retryAgent)),
		callCloseAgent:     method(errOnly(r.closeAgent)),
		callStopTask:       method(errOnly(r.stopTask)),
		callSetBudget:      method(errOnly(r.setBudget)),
		callCancelItem:     method(errOnly(r.cancelItem)),
		callMoveItem:       method(errOnly(r.moveItem)),
		callAnswerApproval: method(errOnly(r.answerApproval)),
		callSetPermMode:    method(errOnly(r.setPermissionMode)),
		callCloseSession:   method(errOnly(r.closeSession)),
		callSessionGet:     method(r.sessionGet),
		callSessionStatus:  method(r.sessionStatusCall),
		callAgentGet:       method(r.agentGet),
		callRunList:        method(r.runList),
		callInboxList:      method(r.inboxList),
		callTaskOutput:     method(r.taskOutput),
		callWaitQuiescent:  method(r.waitQuiescentCall),
	}
}

// route runs a call where its session runs: here when this node runs it or
// can take it over now, else on the node that holds its lease. While the
// session is between owners (its node stopped answering, a takeover is in
// progress) it retries, for up to ClusterOptions.RouteWait; then the answer is
// CodeUnavailable with a RetryAfter. Outside a cluster it runs here.
func route[P, R any](ctx context.Context, r *Runtime, name string, session SessionID, p P, f local[P, R]) (R, error) {
	var zero R
	if r.cl == nil {
		res, err := f(ctx, session, p)
		return res, wrapErr(err)
	}
	start := time.Now()
	wait := 50 * time.Millisecond
	for {
		owner, addr, err := r.locate(ctx, session)
		var res R
		switch {
		case err != nil:
		case addr == "":
			res, err = f(ctx, session, p)
		default:
			res, err = watched(ctx, r, owner, func(ctx context.Context) (R, error) {
				return forward[R](ctx, r, addr, name, session, p)
			})
		}
		if err == nil {
			return res, nil
		}
		if !betweenOwners(err) || r.closing() {
			return zero, wrapErr(err)
		}
		var down *peerDown
		if errors.As(err, &down) && down.sent && !idempotent(name) {
			// The node may have run it before it stopped answering: sent
			// again, a prompt or a message would be there twice.
			return zero, &Error{Code: CodeUnavailable, Err: err,
				Message: fmt.Sprintf("session %s: its node stopped answering during the call (%v); it may or may not have been applied: read the session before sending it again", session, err)}
		}
		r.cl.forget(session)
		if time.Since(start)+wait > r.cl.opts.RouteWait {
			return zero, &Error{Code: CodeUnavailable, RetryAfter: 2 * time.Second, Err: err,
				Message: fmt.Sprintf("session %s is between nodes (%v); retry", session, err)}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, wrapErr(ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// betweenOwners reports whether err means the session is moving: the
// node asked does not run it (any more), is stopping, cannot be reached,
// or a takeover is in progress.
func betweenOwners(err error) bool {
	var pe *peerDown
	if errors.As(err, &pe) || errors.Is(err, errNotMember) || errors.Is(err, errUnsure) || errors.Is(err, store.ErrFenced) {
		return true
	}
	switch CodeOf(err) {
	case CodeMoved, CodeRecovering, CodeShuttingDown:
		return true
	}
	return false
}

// locate says where a session runs: "" for here (this node runs it, or
// took it over now, or the session is not one any node runs: the call
// answers for itself), else the live node that holds its lease and its
// advertised address. A session this node runs under a lease that ran out
// by its clock, or while its heartbeats failed for DeadAfter (the others
// may have taken it over: a pause, a partition), is not answered from the
// copy here: the renewal is asked for at once, and the caller waits for
// its outcome as for a session between owners.
func (r *Runtime) locate(ctx context.Context, session SessionID) (owner, addr string, err error) {
	r.mu.Lock()
	a := r.actors[core.SessionID(session)]
	r.mu.Unlock()
	now := r.clock.Now()
	if r.cl.bugs.noForward {
		return "", "", nil
	}
	if a != nil {
		return "", "", r.doubted(a, now)
	}
	if owner, ok := r.cl.cachedOwner(session); ok {
		if addr := r.cl.address(r.opts.Node, owner); addr != "" {
			return owner, addr, nil
		}
	}
	_, err = r.actor(string(session))
	var held *store.LeaseHeldError
	if err == nil || !errors.As(err, &held) {
		return "", "", nil
	}
	if addr := r.cl.address(r.opts.Node, held.Owner); addr != "" {
		r.cl.remember(session, held.Owner)
		return held.Owner, addr, nil
	}
	return "", "", fmt.Errorf("session %s: held by %s until %s: %w", session, held.Owner, held.Expires.UTC().Format(time.RFC3339), errNotMember)
}

// doubted says why this node must not answer for the session of a, which
// it runs, or nil: its lease ran out by this node's clock, or is being
// lost, or this node's heartbeats failed for DeadAfter (a pause, a
// partition: the others may have taken its sessions over). The renewal is
// asked for at once; its outcome settles the doubt.
func (r *Runtime) doubted(a *actor, now time.Time) error {
	exp, losing := a.leaseExpires()
	if losing || !now.Before(exp) || r.cl.unsure(now) {
		r.cl.pokeRenew()
		return fmt.Errorf("session %s: %w", a.id, errUnsure)
	}
	return nil
}

// watched runs a forwarded call, cut short when its node is taken for
// dead meanwhile (a paused node holds the call's connection open): the
// call then fails as one to a node that did not answer, and the caller
// looks for the session's new owner.
func watched[R any](ctx context.Context, r *Runtime, owner string, call func(context.Context) (R, error)) (R, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var dead atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			t := time.NewTimer(r.cl.opts.Heartbeat)
			select {
			case <-stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if !r.cl.alive(r.opts.Node, owner) {
				dead.Store(true)
				cancel()
				return
			}
		}
	}()
	res, err := call(ctx)
	if err != nil && dead.Load() {
		var down *peerDown
		sent := !errors.As(err, &down) || down.sent
		return res, &peerDown{addr: owner, err: fmt.Errorf("taken for dead during the call: %w", err), sent: sent}
	}
	return res, err
}

// idempotent says whether a call may be sent again when their node
// stopped answering after it got them: a second one changes nothing, or is
// refused (an approval answered already).
func idempotent(call string) bool {
	switch call {
	case callAck, callHold, callResume, callCloseAgent, callStopTask, callSetBudget, callCancelItem, callMoveItem,
		callAnswerApproval, callSetPermMode, callCloseSession, callSessionGet, callSessionStatus, callAgentGet, callRunList,
		callInboxList, callTaskOutput, callWaitQuiescent:
		return true
	}
	return false
}

// peerDown is a node that could not be reached or answered out of turn;
// sent says it may have got the call (it was not refused at connect).
type peerDown struct {
	addr string
	err  error
	sent bool
}

func (e *peerDown) Error() string { return fmt.Sprintf("node %s did not answer: %v", e.addr, e.err) }
func (e *peerDown) Unwrap() error { return e.err }

// forward carries a call to the node at addr and returns its answer.
func forward[R any](ctx context.Context, r *Runtime, addr, name string, session SessionID, p any) (R, error) {
	var res R
	params, err := json.Marshal(p)
	if err != nil {
		return res, fmt.Errorf("forward %s: %w", name, err)
	}
	body, err := json.Marshal(peerCall{Method: name, Session: session, Params: params})
	if err != nil {
		return res, fmt.Errorf("forward %s: %w", name, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(addr, "/")+PeerPath, bytes.NewReader(body))
	if err != nil {
		return res, fmt.Errorf("forward %s to %s: %w", name, addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.cl.opts.Token)
	req.Header.Set(ForwardedHeader, r.opts.Node)
	resp, err := r.cl.client.Do(req)
	if err != nil {
		var op *net.OpError
		sent := !errors.As(err, &op) || op.Op != "dial"
		if ctx.Err() != nil && !sent {
			return res, ctx.Err()
		}
		return res, &peerDown{addr: addr, err: err, sent: sent}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return res, &peerDown{addr: addr, err: err, sent: true}
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return res, &Error{Code: CodeInternal, Message: fmt.Sprintf("node %s refused this node's token (%s): every node needs the same cluster token (--token-file or VIGIL_TOKEN)", addr, resp.Status)}
	case resp.StatusCode != http.StatusOK:
		return res, &peerDown{addr: addr, err: fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))}
	}
	var reply peerReply
	if err := json.Unmarshal(b, &reply); err != nil {
		return res, &peerDown{addr: addr, err: fmt.Errorf("bad answer: %w", err)}
	}
	if e := reply.Error; e != nil {
		return res, &Error{Code: e.Code, Message: e.Message, RetryAfter: time.Duration(e.RetryAfter) * time.Millisecond}
	}
	if len(reply.Result) > 0 {
		if err := json.Unmarshal(reply.Result, &res); err != nil {
			return res, fmt.Errorf("forward %s to %s: bad result: %w", name, addr, err)
		}
	}
	return res, nil
}

// PeerHandler serves the calls other nodes of the cluster forward to this
// one (POST PeerPath, a JSON body). Serve it behind the cluster token. A
// call runs here or fails: it is never forwarded again, so a session
// that moved meanwhile answers CodeMoved and its caller looks again.
func (r *Runtime) PeerHandler() http.Handler {
	calls := r.peerMethods()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var c peerCall
		if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<20)).Decode(&c); err != nil {
			http.Error(w, "bad call: "+err.Error(), http.StatusBadRequest)
			return
		}
		m := calls[c.Method]
		if m == nil {
			http.Error(w, fmt.Sprintf("no call %q", c.Method), http.StatusBadRequest)
			return
		}
		// A call that waited out a pause of this node (in its socket, or
		// sent as it woke) is not answered from a copy whose lease may have
		// passed to another node: as in locate, the caller looks again.
		var res any
		var err error
		r.mu.Lock()
		a := r.actors[core.SessionID(c.Session)]
		r.mu.Unlock()
		if a != nil && r.cl != nil {
			if derr := r.doubted(a, r.clock.Now()); derr != nil {
				err = &Error{Code: CodeMoved, Err: derr, Message: derr.Error()}
			}
		}
		if err == nil {
			res, err = m(req.Context(), c.Session, c.Params)
		}
		var reply peerReply
		if err != nil {
			var e *Error
			errors.As(wrapErr(err), &e)
			reply.Error = &peerError{Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter.Milliseconds()}
		} else if reply.Result, err = json.Marshal(res); err != nil {
			reply.Result = nil
			reply.Error = &peerError{Code: CodeInternal, Message: "encode result: " + err.Error()}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(reply)
	})
}

// defaultPeerClient gives up connecting to a node after 3 s; a call's own
// context bounds the rest (WaitQuiescent waits long).
func defaultPeerClient() *http.Client {
	d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: d.DialContext, MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second,
	}}
}
