package mcpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestParseConfigs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(file, []byte(`{"mcpServers":{"b":{"type":"http","url":"http://x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfigs([]string{`{"mcpServers":{"a":{"command":"srv","args":["-v"],"env":{"K":"V"}},"b":{"command":"old"}}}`, file})
	if err != nil {
		t.Fatal(err)
	}
	if got["a"].Command != "srv" || got["a"].Env["K"] != "V" || got["b"].Type != "http" || got["b"].URL != "http://x" {
		t.Fatalf("configs %+v", got)
	}
	for _, bad := range []string{`{"mcpServers":{"a b":{"command":"x"}}}`, `{"mcpServers":`, filepath.Join(t.TempDir(), "none.json")} {
		if _, err := ParseConfigs([]string{bad}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// A server over streamable HTTP serves its tools under mcp__<server>__,
// with the configured headers; servers that cannot be reached are
// reported failed and leave the others serving.
func TestConnectAndCall(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)
	var header string
	type in struct {
		X string `json:"x"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo x"}, func(_ context.Context, req *mcp.CallToolRequest, args in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + args.X + " " + header}}, IsError: args.X == "bad"}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server { header = r.Header.Get("X-Key"); return srv }, nil)
	ts := httptest.NewServer(h)
	defer ts.Close()
	set, statuses := Connect(context.Background(), map[string]Config{
		"web":     {Type: "http", URL: ts.URL, Headers: map[string]string{"X-Key": "k1"}},
		"nocmd":   {},
		"inproc":  {Type: "sdk"},
		"strange": {Type: "ws"},
		"gone":    {Command: filepath.Join(t.TempDir(), "no-such-server")},
	}, nil, nil)
	defer set.Close()
	var got []string
	for _, s := range statuses {
		got = append(got, s.Name+":"+s.Status)
	}
	if strings.Join(got, " ") != "gone:failed inproc:failed nocmd:failed strange:failed web:connected" {
		t.Fatalf("statuses %q", got)
	}
	if names := set.Names(); len(names) != 1 || names[0] != "mcp__web__echo" {
		t.Fatalf("tools %q", names)
	}
	if res, isErr := set.Call(context.Background(), "mcp__web__echo", []byte(`{"x":"hi"}`)); isErr || res != "echo hi k1" {
		t.Fatalf("call: %q %v", res, isErr)
	}
	if res, isErr := set.Call(context.Background(), "mcp__web__echo", []byte(`{"x":"bad"}`)); !isErr || !strings.Contains(res, "echo bad") {
		t.Fatalf("an error result: %q %v", res, isErr)
	}
	if _, isErr := set.Call(context.Background(), "mcp__web__nope", nil); !isErr {
		t.Fatal("a call of no tool succeeded")
	}
}
