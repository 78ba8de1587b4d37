// Package transcript exports an agent's conversation as JSONL: one line per
// message, tool call, tool result, notification and inbox operation
// (enqueue, dequeue, remove), with timestamps, so a person can read what
// happened, as they do with Claude Code's session files.
package transcript

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/vigilrun/vigil/chat"
	"github.com/vigilrun/vigil/core"
)

// Line is one line of a transcript.
type Line struct {
	Seq   int64        `json:"seq"`
	At    time.Time    `json:"timestamp"`
	Type  string       `json:"type"` // user, assistant, tool_use, tool_result, notification, queue-operation, run, message
	Agent core.AgentID `json:"agent"`
	Name  string       `json:"agent_name,omitempty"`
	Run   int          `json:"run,omitempty"`
	// Operation is enqueue, dequeue or remove for queue-operation lines,
	// start or end for run lines.
	Operation string          `json:"operation,omitempty"`
	Item      core.ItemID     `json:"item,omitempty"`
	Kind      string          `json:"kind,omitempty"`
	Priority  core.Priority   `json:"priority,omitempty"`
	From      string          `json:"from,omitempty"`
	Content   string          `json:"content,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Key       string          `json:"key,omitempty"`
	Status    string          `json:"status,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// Builder turns a session's events, in order, into transcript lines. It
// keeps the little state it needs (agent names, current runs, items).
type Builder struct {
	// Agent, when set, keeps only that agent's lines.
	Agent core.AgentID
	names map[core.AgentID]string
	runs  map[core.AgentID]int
	items map[core.ItemID]core.Item
}

// NewBuilder returns a builder; agent "" keeps every agent's lines.
func NewBuilder(agent core.AgentID) *Builder {
	return &Builder{Agent: agent, names: map[core.AgentID]string{core.MainAgent: "main"}, runs: map[core.AgentID]int{}, items: map[core.ItemID]core.Item{}}
}

// Add returns the lines of one event.
func (b *Builder) Add(e core.Event) []Line {
	var out []Line
	add := func(l Line) {
		if b.Agent != "" && l.Agent != b.Agent {
			return
		}
		l.Seq, l.At = e.Seq, e.At
		l.Name = b.names[l.Agent]
		if l.Run == 0 {
			l.Run = b.runs[l.Agent]
		}
		out = append(out, l)
	}
	switch ev := e.Body.(type) {
	case *core.SessionCreated:
		b.names[core.MainAgent] = ev.Main.Name
		if ev.Main.Name == "" {
			b.names[core.MainAgent] = "main"
		}
	case *core.AgentCreated:
		b.names[ev.Agent.ID] = ev.Agent.Name
	case *core.ItemEnqueued:
		it := ev.Item
		b.items[it.ID] = it
		add(Line{Type: "queue-operation", Operation: "enqueue", Agent: it.Agent, Item: it.ID, Kind: string(it.Kind), Priority: it.Priority, From: it.From, Content: it.Text, Run: -1})
	case *core.ItemRemoved:
		add(Line{Type: "queue-operation", Operation: "remove", Agent: ev.Agent, Item: ev.Item, Reason: ev.Reason, Run: -1})
	case *core.RunStarted:
		b.runs[ev.Agent] = ev.Seq
		add(Line{Type: "run", Operation: "start", Agent: ev.Agent, Run: ev.Seq, Kind: string(ev.Kind)})
		for _, id := range ev.Items {
			add(Line{Type: "queue-operation", Operation: "dequeue", Agent: ev.Agent, Item: id, Kind: string(b.items[id].Kind), Run: ev.Seq})
		}
	case *core.ItemsJoined:
		for _, id := range ev.Items {
			add(Line{Type: "queue-operation", Operation: "dequeue", Agent: ev.Agent, Item: id, Kind: string(b.items[id].Kind), Run: ev.Seq})
		}
	case *core.TranscriptAppended:
		for _, l := range messageLines(ev.Agent, ev.Message) {
			add(l)
		}
	case *core.RunEnded:
		add(Line{Type: "run", Operation: "end", Agent: ev.Agent, Run: ev.Seq, Status: string(ev.Status), Content: ev.Reply, Reason: ev.Error})
	case *core.NotificationWritten:
		n := ev.Note
		add(Line{Type: "notification", Agent: n.Owner, Key: n.Key.String(), Status: n.Status, From: string(n.Agent), Content: core.RenderNote(&n), Run: -1})
	case *core.MessageSent:
		m := ev.Msg
		add(Line{Type: "message", Agent: m.To, From: m.From, Status: string(m.Outcome), Reason: m.Reason, Content: m.Text, Priority: m.Priority, Run: -1})
	}
	for i := range out {
		if out[i].Run < 0 {
			out[i].Run = 0
		}
	}
	return out
}

func messageLines(agent core.AgentID, m chat.Message) []Line {
	var out []Line
	for _, bl := range m.Content {
		switch bl.Type {
		case chat.BlockText:
			out = append(out, Line{Type: string(m.Role), Agent: agent, Content: bl.Text})
		case chat.BlockToolUse:
			out = append(out, Line{Type: "tool_use", Agent: agent, Tool: bl.Name, ToolUseID: bl.ID, Input: bl.Input})
		case chat.BlockToolResult:
			out = append(out, Line{Type: "tool_result", Agent: agent, ToolUseID: bl.ToolUseID, Content: bl.Content, IsError: bl.IsError})
		}
	}
	return out
}

// Write writes the transcript of events as JSONL.
func Write(w io.Writer, events []core.Event, agent core.AgentID) error {
	b := NewBuilder(agent)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, e := range events {
		for _, l := range b.Add(e) {
			if err := enc.Encode(l); err != nil {
				return fmt.Errorf("write transcript: %w", err)
			}
		}
	}
	return nil
}
