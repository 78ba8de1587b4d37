package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool names. Each starts with vigil_, so that a model does not mistake
// them for its client's built-in sub-agent tools (Claude Code's Task,
// Codex's spawn_agent).
const (
	ToolSpawn       = "vigil_spawn"
	ToolSend        = "vigil_send"
	ToolWait        = "vigil_wait"
	ToolAck         = "vigil_ack"
	ToolStatus      = "vigil_status"
	ToolOutput      = "vigil_output"
	ToolStop        = "vigil_stop"
	ToolClose       = "vigil_close"
	ToolList        = "vigil_list"
	ToolQueue       = "vigil_queue"
	ToolQueueCancel = "vigil_queue_cancel"
	ToolHold        = "vigil_hold"
	ToolResume      = "vigil_resume"
	ToolApprovals   = "vigil_approvals"
	ToolApprove     = "vigil_approve"
)

// WaitLimitHeader is the HTTP request header in which a bridge gives the
// wait limit of the MCP client behind it, in seconds, so that the server
// fits waits to that client rather than to the bridge.
const WaitLimitHeader = "Vigil-Wait-Limit"

// Wait limits. A client cancels a tool call that takes longer than its own
// timeout, and the model then sees an error; a wait therefore returns, as
// a normal result, a margin before the client's limit.
const (
	// DefaultClientWait is the limit of a client vigil does not know: the
	// official TypeScript SDK, on which many clients are built, times a
	// request out after 60 s.
	DefaultClientWait = 50 * time.Second
	// maxWaitCap bounds every wait.
	maxWaitCap = time.Hour
)

// clientWaits are the wait limits of the clients vigil knows, by the name
// they give at initialize, with their own timeouts:
//   - Codex ("codex-mcp-client") cancels a tool call after tool_timeout_sec,
//     300 s by default in 0.169.0: a wait returns at 270 s;
//   - Claude Code ("claude-code") times a tool call out after
//     MCP_TOOL_TIMEOUT, which is far longer than an hour by default.
var clientWaits = map[string]time.Duration{
	"codex-mcp-client": 270 * time.Second,
	"codex":            270 * time.Second,
	"claude-code":      maxWaitCap,
}

// WaitLimit returns the longest a wait may block for the MCP client that
// named itself name at initialize: its own tool-call timeout less a margin
// for the known clients, DefaultClientWait for the others.
func WaitLimit(name string) time.Duration {
	if d, ok := clientWaits[strings.ToLower(strings.TrimSpace(name))]; ok {
		return d
	}
	return DefaultClientWait
}

// ProjectKey returns the owner key of the project that holds dir: the root
// of its git work tree when it is in one, else dir itself. The key is
// stable for the project and readable: "project-<name>-<hash>", where the
// hash is of the project's absolute path, so two projects of the same name
// do not share tasks.
func ProjectKey(dir string) string {
	root := ProjectRoot(dir)
	sum := sha256.Sum256([]byte(root))
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, filepath.Base(root))
	if len(name) > 40 {
		name = name[:40]
	}
	return "project-" + name + "-" + hex.EncodeToString(sum[:5])
}

// ProjectRoot returns the root of the git work tree that holds dir (the
// nearest directory up from it with a .git entry), else dir; dir is made
// absolute and clean first.
func ProjectRoot(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	for d := abs; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return abs
		}
		d = up
	}
}

// limitFor returns the wait limit of a request's client: the one a bridge
// gives in WaitLimitHeader, else limitOf the name the client gave at
// initialize.
func limitFor(extra *mcp.RequestExtra, session mcp.Session, limitOf func(client string) time.Duration) time.Duration {
	if extra != nil && extra.Header != nil {
		if secs, err := strconv.Atoi(extra.Header.Get(WaitLimitHeader)); err == nil && secs > 0 {
			return min(time.Duration(secs)*time.Second, maxWaitCap)
		}
	}
	return limitOf(clientOf(session))
}

// clientOf returns the name a server session's client gave at initialize.
func clientOf(session mcp.Session) string {
	if ss, ok := session.(*mcp.ServerSession); ok && ss != nil {
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			return ip.ClientInfo.Name
		}
	}
	return ""
}

// serve runs one MCP session of ms on t until the client disconnects or
// ctx ends; neither is an error, and neither is logged as one.
func serve(ctx context.Context, ms *mcp.Server, t mcp.Transport, log *slog.Logger) error {
	ss, err := ms.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case <-ctx.Done():
		_ = ss.Close()
		<-done
		log.Info("mcp connection closed: vigil is stopping")
		return nil
	case err := <-done:
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
			return fmt.Errorf("mcp: %w", err)
		}
		log.Info("mcp client disconnected")
		return nil
	}
}

// fitWaitTool returns the middleware that lists the wait tool as the
// client of each session may call it: its timeout's maximum is that
// client's limit, and its description says so.
func fitWaitTool(limitOf func(client string) time.Duration) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			lr, ok := res.(*mcp.ListToolsResult)
			if err != nil || method != "tools/list" || !ok {
				return res, err
			}
			limit := limitFor(req.GetExtra(), req.GetSession(), limitOf)
			out := *lr
			out.Tools = make([]*mcp.Tool, len(lr.Tools))
			for i, t := range lr.Tools {
				out.Tools[i] = t
				if t.Name == ToolWait {
					out.Tools[i] = waitToolFor(t, limit)
				}
			}
			return &out, nil
		}
	}
}

// limitSentence starts what the wait tool's description says of the
// client's limit.
const limitSentence = " This client allows a wait of at most"

// waitToolFor returns a copy of the wait tool whose timeout is at most
// limit.
func waitToolFor(t *mcp.Tool, limit time.Duration) *mcp.Tool {
	c := *t
	secs := int(limit / time.Second)
	desc, _, _ := strings.Cut(t.Description, limitSentence) // a bridge lists the server's, fitted to the bridge
	c.Description = fmt.Sprintf("%s%s %d seconds: a longer one returns at %d s, as a normal result with what still runs (timed_out); then call %s again.",
		desc, limitSentence, secs, secs, ToolWait)
	b, err := json.Marshal(t.InputSchema)
	if err != nil {
		return &c
	}
	var schema map[string]any
	if json.Unmarshal(b, &schema) != nil {
		return &c
	}
	if props, ok := schema["properties"].(map[string]any); ok {
		if ts, ok := props["timeout_seconds"].(map[string]any); ok {
			ts["maximum"] = secs
			ts["description"] = fmt.Sprintf("how long to block when nothing is there yet, in seconds, at most %d (this client's limit); default %d; 0 returns at once", secs, min(secs, 120))
		}
	}
	c.InputSchema = schema
	return &c
}
