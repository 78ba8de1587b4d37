package mcpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/store/memstore"
)

// TestSessionTag: with Options.SessionTag every HTTP MCP session id is
// "<tag>.<random>", and the session works; without it the id has no tag.
func TestSessionTag(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, tag := range []string{"n1a2b3c4", ""} {
		st := memstore.New()
		rt := openRuntime(t, ctx, vigil.Options{Store: st, DataDir: t.TempDir()})
		ms := mcpserver.New(rt, &mcpserver.Options{Logger: testLogger(t), SessionTag: tag})
		ts := httptest.NewServer(ms.Handler())
		t.Cleanup(func() {
			ms.Close()
			ts.Close()
			rt.Close()
			st.Close()
		})
		tr := &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: &http.Client{}, MaxRetries: -1}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := cs.ID()
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatalf("tag %q: list tools: %v", tag, err)
		}
		cs.Close()
		head, rest, dotted := strings.Cut(id, ".")
		switch {
		case tag != "" && (!dotted || head != tag || len(rest) < 16):
			t.Errorf("tag %q: session id %q, want %q.<random>", tag, id, tag)
		case tag == "" && dotted:
			t.Errorf("no tag: session id %q has a dot", id)
		}
	}
}
