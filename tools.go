package vigil

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/tool"
)

// ToolSet is a set of tools a program adds to a session beyond vigil's
// own: the tools of its MCP servers, for one. Every agent's model of the
// session is offered them; a call runs, once the session's permissions
// allow it (an allow rule naming the tool, a person's answer, mode
// bypass), through Call.
type ToolSet interface {
	// Specs are the tools, by name, description and input schema. Names
	// must not be those of vigil's tools.
	Specs() []chat.ToolSpec
	// Call runs one call and returns its result text and whether it is an
	// error. It must return when ctx ends (the call was cancelled).
	Call(ctx context.Context, name string, input json.RawMessage) (result string, isError bool)
}

// SetTools gives the session more tools from now on, in this process: the
// next model round of each agent sees them; nil takes them away. They are
// not stored: a process that takes the session over (after a restart, in
// a cluster) has none until its program sets them again, and a call of
// one then ends in an error the model reads.
func (r *Runtime) SetTools(session SessionID, ts ToolSet) error {
	if ts != nil {
		for _, s := range ts.Specs() {
			if _, ok := tool.Spec(s.Name); ok {
				return invalidf("tool %q is one of vigil's own", s.Name)
			}
			if s.Name == "" {
				return invalidf("a tool without a name")
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.actors[core.SessionID(session)]
	if a == nil {
		return &Error{Code: CodeNotFound, Message: fmt.Sprintf("session %s does not run in this process", session)}
	}
	if r.tools == nil {
		r.tools = map[SessionID]ToolSet{}
	}
	if ts == nil {
		delete(r.tools, session)
	} else {
		r.tools[session] = ts
	}
	return nil
}

// toolsOf returns the session's added tools, or nil.
func (r *Runtime) toolsOf(session SessionID) ToolSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools[session]
}

// specsFor returns the tools a model round of the session is offered.
func (r *Runtime) specsFor(session SessionID) []chat.ToolSpec {
	specs := tool.Specs()
	if ts := r.toolsOf(session); ts != nil {
		specs = append(specs, ts.Specs()...)
	}
	return specs
}
