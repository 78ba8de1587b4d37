// Package mcptest drives vigil's MCP tools with the SDK's client, for tests
// over any transport: typed calls, a collector that acknowledges what it
// reads and checks that every notification arrives exactly once, and the
// kill-and-restart scenario that the stdio and HTTP tests share.
package mcptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/mcpserver"
	"github.com/vigilrun/vigil/store"
)

// ToolError is a tool's error result (IsError), as opposed to a protocol or
// transport error.
type ToolError struct{ Message string }

// Error implements error.
func (e *ToolError) Error() string { return "tool error: " + e.Message }

// Client calls the tools on one MCP client session.
type Client struct {
	CS *mcp.ClientSession
	// OwnerKey, when set, is passed as owner_key in every call.
	OwnerKey string
}

// Call calls a tool and decodes its structured result into out (when not
// nil). A tool error is a *ToolError.
func (c *Client) Call(ctx context.Context, tool string, args map[string]any, out any) error {
	a := map[string]any{}
	maps.Copy(a, args)
	if c.OwnerKey != "" {
		a["owner_key"] = c.OwnerKey
	}
	res, err := c.CS.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: a})
	if err != nil {
		return fmt.Errorf("call %s: %w", tool, err)
	}
	if res.IsError {
		var parts []string
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
		return &ToolError{Message: strings.Join(parts, "\n")}
	}
	if out == nil {
		return nil
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return fmt.Errorf("%s: structured content: %w", tool, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: decode %s: %w", tool, b, err)
	}
	return nil
}

// Spawn calls spawn_agent.
func (c *Client) Spawn(ctx context.Context, name, prompt string) (mcpserver.SpawnOutput, error) {
	var out mcpserver.SpawnOutput
	err := c.Call(ctx, mcpserver.ToolSpawn, map[string]any{"name": name, "prompt": prompt}, &out)
	return out, err
}

// Send calls send_message for a task.
func (c *Client) Send(ctx context.Context, task, msg string) (mcpserver.SendOutput, error) {
	var out mcpserver.SendOutput
	err := c.Call(ctx, mcpserver.ToolSend, map[string]any{"task": task, "message": msg}, &out)
	return out, err
}

// Collector reads notifications through wait the way a careful client
// does: it passes everything it read in the ack of its next wait and
// forgets it only once that wait succeeded. It records every key it
// reads, and every key it reads twice.
type Collector struct {
	// Seen holds every notification read, by id.
	Seen map[string]mcpserver.Notification
	// Dups lists ids read again after they were read once.
	Dups []string
	// Pending are ids read and not yet acknowledged by a successful call.
	Pending []string
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{Seen: map[string]mcpserver.Notification{}} }

// Wait calls wait with the pending acks and records what it returns.
func (col *Collector) Wait(ctx context.Context, c *Client, tasks []string, timeout int) (mcpserver.WaitOutput, error) {
	args := map[string]any{"timeout_seconds": timeout}
	if len(tasks) > 0 {
		args["tasks"] = tasks
	}
	if len(col.Pending) > 0 {
		args["ack"] = col.Pending
	}
	var out mcpserver.WaitOutput
	if err := c.Call(ctx, mcpserver.ToolWait, args, &out); err != nil {
		return out, err
	}
	col.Pending = nil
	for _, n := range out.Notifications {
		if _, ok := col.Seen[n.ID]; ok {
			col.Dups = append(col.Dups, n.ID)
		}
		col.Seen[n.ID] = n
		col.Pending = append(col.Pending, n.ID)
	}
	return out, nil
}

// Flush acknowledges what is pending with the ack tool.
func (col *Collector) Flush(ctx context.Context, c *Client) error {
	if len(col.Pending) == 0 {
		return nil
	}
	if err := c.Call(ctx, mcpserver.ToolAck, map[string]any{"ids": col.Pending}, nil); err != nil {
		return err
	}
	col.Pending = nil
	return nil
}

// Keys returns the ids read, sorted.
func (col *Collector) Keys() []string {
	return slices.Sorted(maps.Keys(col.Seen))
}

// Scenario is the exactly-once scenario's transport: how to reach vigil
// and how to kill and restart it.
type Scenario struct {
	// Client is connected to vigil.
	Client *Client
	// Restart kills vigil (SIGKILL where it is a process) while the slow
	// agent's follow-on run is in flight, starts it again on the same
	// store, and returns a client connected to the new one with the same
	// identity.
	Restart func() *Client
}

// Result is what the scenario saw.
type Result struct {
	Collector *Collector
	// Tasks are the task ids of f1, f2 and slow.
	Tasks map[string]string
	// Message is the id of the message sent to slow.
	Message string
}

// RetryCalls is how many times the scenario repeats a wait that failed
// because of the restart (a transport error, or a bridge's tool error).
const RetryCalls = 3

// ExactlyOnce spawns three agents (f1, f2 and slow, from
// testdata/agents.yaml), waits for any, sends slow a message inside its
// slow final round (pending on it, then queued-behind-stop), kills and restarts vigil in the
// middle, and reads every notification, acknowledging as it goes. It
// fails t unless each of the four notifications (f1#1, f2#1, slow#1,
// slow#2) arrives exactly once.
func ExactlyOnce(ctx context.Context, t testing.TB, sc Scenario) Result {
	t.Helper()
	c := sc.Client
	res := Result{Collector: NewCollector(), Tasks: map[string]string{}}
	col := res.Collector
	for _, name := range []string{"f1", "f2", "slow"} {
		out, err := c.Spawn(ctx, name, "part "+name)
		if err != nil {
			t.Fatalf("spawn %s: %v", name, err)
		}
		res.Tasks[name] = out.Task
	}
	// Wait for any: the fast ones report at once.
	out, err := col.Wait(ctx, c, nil, 30)
	if err != nil || len(out.Notifications) == 0 {
		t.Fatalf("first wait: %v %+v", err, out)
	}
	// slow is in its slow final round: the message lands inside it, and
	// send_message answers at once, pending on that round (DESIGN rule 11).
	m, err := c.Send(ctx, res.Tasks["slow"], "one more thing")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	res.Message = m.Message
	if m.Outcome != string(core.OutcomePending) && m.Outcome != string(core.OutcomeQueuedBehindStop) || m.Run != 1 || len(m.Notifications) != 2 {
		t.Fatalf("send to slow while it is stopping: %+v", m)
	}
	// Read what is there (slow#1 at least), acknowledging the first batch;
	// this batch stays unacknowledged across the kill.
	if _, err := col.Wait(ctx, c, nil, 30); err != nil {
		t.Fatalf("second wait: %v", err)
	}
	if _, ok := col.Seen[res.Tasks["slow"]+"#1"]; !ok {
		t.Fatalf("slow#1 not read before the kill: %v", col.Keys())
	}
	var st mcpserver.TaskStatusOutput
	if err := c.Call(ctx, mcpserver.ToolStatus, map[string]any{"task": res.Tasks["slow"]}, &st); err != nil {
		t.Fatalf("task_status: %v", err)
	}
	t.Logf("restarting vigil; slow is %s: %s", st.State, st.Detail)
	c = sc.Restart()
	for {
		var out mcpserver.WaitOutput
		var err error
		for range RetryCalls {
			if out, err = col.Wait(ctx, c, nil, 30); err == nil || ctx.Err() != nil {
				break
			}
			t.Logf("wait after the restart failed (retrying): %v", err)
		}
		if err != nil {
			t.Fatalf("wait after the restart: %v", err)
		}
		if len(out.Notifications) == 0 && len(out.Running) == 0 {
			break
		}
		if out.TimedOut {
			t.Fatalf("wait timed out with %d task(s) running: %+v", len(out.Running), out.Running)
		}
	}
	if err := col.Flush(ctx, c); err != nil {
		t.Fatalf("final ack: %v", err)
	}
	if len(col.Dups) > 0 {
		t.Errorf("notifications read twice: %v", col.Dups)
	}
	var want []string
	for _, k := range []string{"f1#1", "f2#1", "slow#1", "slow#2"} {
		name, run, _ := strings.Cut(k, "#")
		want = append(want, res.Tasks[name]+"#"+run)
	}
	slices.Sort(want)
	if got := col.Keys(); !slices.Equal(got, want) {
		t.Errorf("notifications read: %v, want %v", got, want)
	}
	last := col.Seen[res.Tasks["slow"]+"#2"]
	if len(last.Answered) != 1 || last.Answered[0].ID != res.Message || last.Answered[0].Text != "one more thing" || !strings.Contains(last.Reply, "one more thing") {
		t.Errorf("slow#2 does not answer the message: %+v", last)
	}
	// A wait now returns nothing: acknowledged is never again.
	var after mcpserver.WaitOutput
	if err := c.Call(ctx, mcpserver.ToolWait, map[string]any{"timeout_seconds": 0}, &after); err != nil || len(after.Notifications) != 0 {
		t.Errorf("a wait after everything was acknowledged: %v %+v", err, after)
	}
	return res
}

// CheckStore fails t unless the notifications the store holds for the
// owner's sessions are exactly the ids read, all delivered.
func CheckStore(ctx context.Context, t testing.TB, st store.Store, owner string, read []string) {
	t.Helper()
	rows, err := st.SessionList(ctx, &store.SessionListParams{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, row := range rows {
		recs, err := st.EventList(ctx, &store.EventListParams{Session: row.ID, Limit: 100_000})
		if err != nil {
			t.Fatal(err)
		}
		evs := make([]core.Event, 0, len(recs))
		for _, rec := range recs {
			body, err := core.DecodeBody(rec.Type, rec.Data)
			if err != nil {
				t.Fatalf("event %s#%d: %v", rec.Session, rec.Seq, err)
			}
			evs = append(evs, core.Event{Seq: rec.Seq, At: rec.At, Body: body})
		}
		s := core.Replay(evs)
		for _, k := range s.NoteOrder {
			n := s.Notes[k]
			id := row.ID + "/" + k.String()
			stored = append(stored, id)
			if n.DeliveredRun == 0 {
				t.Errorf("notification %s is in the store but not delivered (dropped: %q)", id, n.Dropped)
			}
		}
	}
	slices.Sort(stored)
	read = slices.Sorted(slices.Values(read))
	if !slices.Equal(stored, read) {
		t.Errorf("notifications in the store %v, read %v", stored, read)
	}
}

// IsToolError reports whether err is a tool error containing sub.
func IsToolError(err error, sub string) bool {
	var te *ToolError
	return errors.As(err, &te) && strings.Contains(te.Message, sub)
}
