package script_test

import (
	"encoding/json"
	"testing"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/providertest"
	"github.com/vigilrun/vigil/provider/script"
)

// TestConformance runs the answer half of the providertest suite: the
// scripted provider talks to no server, so retries, cut streams and
// redaction do not apply to it.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Answering: func(t *testing.T, reply providertest.Reply) provider.Provider {
			var turn script.Turn
			for _, b := range reply.Blocks {
				switch b.Type {
				case chat.BlockText:
					turn.Say += b.Text
				case chat.BlockToolUse:
					var input any
					if len(b.Input) > 0 {
						if err := json.Unmarshal(b.Input, &input); err != nil {
							t.Fatalf("tool input %s: %v", b.Input, err)
						}
					}
					turn.Tools = append(turn.Tools, map[string]any{b.Name: input})
				}
			}
			return script.New(&script.Scenario{Name: "conformance", Agents: map[string]*script.Agent{"*": {Turns: []script.Turn{turn}}}}, nil)
		},
	})
}
