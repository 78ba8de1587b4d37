package vigil

import (
	"context"
	"encoding/json"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/store"
)

// The tests of this package look at the core's state, which the library
// API does not hand out: these helpers exist only in the test build.

// Inspect runs fn on the session's state, on the session's goroutine.
func (r *Runtime) Inspect(ctx context.Context, session SessionID, fn func(s *core.State)) error {
	return r.inspect(ctx, session, fn)
}

// State returns a copy of the session's state.
func (r *Runtime) State(ctx context.Context, session SessionID) (*core.State, error) {
	var b []byte
	var merr error
	if err := r.inspect(ctx, session, func(s *core.State) { b, merr = json.Marshal(s) }); err != nil {
		return nil, err
	}
	if merr != nil {
		return nil, merr
	}
	s := core.NewState()
	return s, json.Unmarshal(b, s)
}

// ProviderWake records that a provider needs a turn of an agent to continue
// work of its own, as a provider process's hook does.
func (r *Runtime) ProviderWake(ctx context.Context, session SessionID, agent, evidence string) error {
	_, err := r.do(ctx, session, core.ProviderWake{Agent: core.AgentID(agent), Evidence: evidence})
	return err
}

// DecodeEvent decodes an event of a subscription into the core's event.
func DecodeEvent(e Event) (core.Event, error) {
	return decodeEvent(store.Record{Session: string(e.Session), Seq: e.Seq, Global: e.Global, At: e.At, Type: e.Type, Data: e.Data})
}
