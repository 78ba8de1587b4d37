package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/provider/providertest"
)

// testMCPServerEnv makes the test binary an MCP server on stdio (see
// TestMain): one tool, lookup, that answers from its environment.
const testMCPServerEnv = "MCP_WORDS_SERVER"

// runTestMCPServer serves the words server until stdin closes.
func runTestMCPServer() int {
	srv := mcp.NewServer(&mcp.Implementation{Name: "words", Version: "1"}, nil)
	type in struct {
		Key string `json:"key" jsonschema:"the word to look up"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Description: "Look up a word"}, func(_ context.Context, _ *mcp.CallToolRequest, args in) (*mcp.CallToolResult, any, error) {
		leaked := "none"
		for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} {
			if os.Getenv(k) != "" {
				leaked = k
			}
		}
		text := fmt.Sprintf("%s is %s (leaked: %s)", args.Key, os.Getenv("WORD"), leaked)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "words server:", err)
		return 1
	}
	return 0
}

// mcpProgram runs testdata/agentsdk/mcp.mjs with exe, the words server
// given as the program's mcpServers, and returns what it saw.
func mcpProgram(t *testing.T, ctx context.Context, node, sdk, exe string, env []string) []map[string]any {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	servers, _ := json.Marshal(map[string]any{"words": map[string]any{"command": self, "env": map[string]string{testMCPServerEnv: "1", "WORD": "PLUM"}}})
	return startScript(t, ctx, node, sdk, "mcp.mjs", exe, t.TempDir(), env, string(servers)).collect(t, nil)
}

// mcpSeen is what mcp.mjs saw: the words server's status and tool in
// system/init, the tool call it approved, the tool's result and the
// turn's result.
func mcpSeen(lines []map[string]any) []string {
	var out []string
	for _, m := range lines {
		switch {
		case m["subtype"] == "init":
			out = append(out, fmt.Sprintf("init servers=%v tool=%v", m["mcp_servers"], m["has_tool"]))
		case m["callback"] == "canUseTool":
			out = append(out, fmt.Sprintf("canUseTool(%v)", m["tool"]))
		case m["type"] == "user":
			out = append(out, fmt.Sprintf("tool result %v", m["result"]))
		case m["type"] == "result":
			out = append(out, fmt.Sprintf("result %v", m["result"]))
		}
	}
	return out
}

var wantMCPSeen = []string{
	"init servers=[inproc:connected words:connected] tool=true",
	"canUseTool(mcp__words__lookup)",
	"tool result secret is PLUM (leaked: none)",
	"canUseTool(mcp__inproc__count)",
	"tool result PLUM has 4 letters",
	"result MAIN: PLUM has 4 letters",
}

// TestAgentSDKMCPServers: a program's mcpServers reach vigil's session:
// a stdio server (in the SDK's initialize request), started with its own
// environment and none of vigil's keys, and a server the program hosts
// (createSdkMcpServer), reached through mcp_message control requests.
// system/init lists both and their tools, the model calls each tool
// through the program's approval, and the same program sees the same from
// Claude Code 2.1.328.
func TestAgentSDKMCPServers(t *testing.T) {
	node, sdk := agentSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A key in vigil's environment must not reach the server.
	lines := mcpProgram(t, ctx, node, sdk, vigilExe(t), append(scriptedEnv(t, "mcp.yaml"), "ANTHROPIC_API_KEY=sk-must-not-reach-the-server"))
	if got := mcpSeen(lines); !slices.Equal(got, wantMCPSeen) {
		t.Fatalf("on vigil the program saw\n  %s\nwant\n  %s\nlines: %v", strings.Join(got, "\n  "), strings.Join(wantMCPSeen, "\n  "), lines)
	}

	cli := comparedCLI(t)
	srv := providertest.NewAnthropic(t)
	srv.Fallback(func(r *providertest.Request) (providertest.Reply, bool) {
		last := r.LastUserText()
		switch {
		case sdkToolResult(r) && strings.Contains(last, "letters"):
			return providertest.TextAnswer("MAIN: " + last), true
		case sdkToolResult(r):
			return providertest.Answer(providertest.ToolUse("", "mcp__inproc__count", `{"word":"PLUM"}`)), true
		case strings.Contains(last, "Look up the secret word"):
			return providertest.Answer(providertest.ToolUse("", "mcp__words__lookup", `{"key":"secret"}`)), true
		}
		return providertest.Answer(chat.Text("ok")), true
	})
	cliLines := mcpProgram(t, ctx, node, sdk, cli, cliEnv(t, srv.URL))
	got := mcpSeen(cliLines)
	t.Logf("claude code: %s", strings.Join(got, "; "))
	// The CLI passes its whole environment to the server: its dummy key
	// shows; vigil passes none.
	want := slices.Clone(wantMCPSeen)
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "leaked: none", "leaked: ANTHROPIC_API_KEY")
	}
	if !slices.Equal(got, want) {
		t.Errorf("on Claude Code the program saw\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
