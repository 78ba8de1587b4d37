package codex

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// The test binary doubles as a fake app-server for the lifecycle tests:
// run with FAKE_CODEX=1 it plays a few scripted behaviours instead of the
// tests.
func TestMain(m *testing.M) {
	sandbox.Main() // the tests' commands run in the sandbox
	if os.Getenv("FAKE_CODEX") == "1" {
		os.Exit(fakeAppServer())
	}
	if os.Getenv("VIGIL_CODEX") == "" {
		fmt.Fprintln(os.Stderr, "\n**********\n"+skipMessage+"\n**********")
	}
	os.Exit(m.Run())
}

// fakeAppServer numbers itself N (the count of processes started in
// $FAKE_DIR), records its command line and environment in
// $FAKE_DIR/args-N and the methods it was asked in $FAKE_DIR/calls-N, then
// answers JSON-RPC lines on stdin:
//   - initialize, thread/start (thread "thread-fake") and thread/resume
//     (the thread asked for) are answered;
//   - turn/start runs a turn: turn/started, an agentMessage "fake N: TEXT"
//     and turn/completed; but process 1 exits with status 3 at its
//     second turn/start, before answering it;
//   - a turn whose text is "hold" starts and goes on until turn/steer
//     adds input to it, which it answers with "fake N: steered TEXT";
//   - a turn whose text is "ask" first sends a request of its own
//     (item/commandExecution/requestApproval) and replies with the error
//     it got back.
//
// At the end of stdin it exits 0.
func fakeAppServer() int {
	dir := os.Getenv("FAKE_DIR")
	ents, _ := os.ReadDir(dir)
	n := 1
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "args-") {
			n++
		}
	}
	rec := append(append([]string{}, os.Args[1:]...), "--env--")
	rec = append(rec, os.Environ()...)
	if err := os.WriteFile(filepath.Join(dir, "args-"+strconv.Itoa(n)), []byte(strings.Join(rec, "\n")), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	calls, err := os.Create(filepath.Join(dir, "calls-"+strconv.Itoa(n)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer calls.Close()
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	turns, asked := 0, ""
	for in.Scan() {
		var msg struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil {
			fmt.Fprintln(os.Stderr, "not JSON:", in.Text())
			return 1
		}
		fmt.Fprintf(calls, "%s %s\n", msg.Method, msg.Params)
		var p struct {
			ThreadID string `json:"threadId"`
			Input    []struct {
				Text string `json:"text"`
			} `json:"input"`
		}
		json.Unmarshal(msg.Params, &p)
		turn := func(thread, text string) {
			turns++
			id := "turn-" + strconv.Itoa(turns)
			send(map[string]any{"method": "turn/started", "params": map[string]any{"threadId": thread, "turn": map[string]any{"id": id, "status": "inProgress"}}})
			send(map[string]any{"method": "item/completed", "params": map[string]any{"threadId": thread, "turnId": id,
				"item": map[string]any{"type": "agentMessage", "id": "msg-" + id, "text": fmt.Sprintf("fake %d: %s", n, text)}}})
			send(map[string]any{"method": "turn/completed", "params": map[string]any{"threadId": thread, "turn": map[string]any{"id": id, "status": "completed"}}})
		}
		switch {
		case msg.Method == "" && msg.Error != nil && asked != "":
			turn(asked, "refused: "+msg.Error.Message)
			asked = ""
		case msg.Method == "initialize":
			send(map[string]any{"id": msg.ID, "result": map[string]any{"userAgent": "fake"}})
		case msg.Method == "thread/start":
			send(map[string]any{"id": msg.ID, "result": map[string]any{"thread": map[string]any{"id": "thread-fake"}}})
		case msg.Method == "thread/resume":
			send(map[string]any{"id": msg.ID, "result": map[string]any{"thread": map[string]any{"id": p.ThreadID}}})
		case msg.Method == "turn/start":
			if n == 1 && turns == 1 {
				fmt.Fprintln(os.Stderr, "fake: dying before the turn")
				return 3
			}
			send(map[string]any{"id": msg.ID, "result": map[string]any{"turn": map[string]any{"id": "turn-" + strconv.Itoa(turns+1), "status": "inProgress"}}})
			text := ""
			if len(p.Input) > 0 {
				text = p.Input[0].Text
			}
			if text == "hold" {
				// A turn that goes on until input joins it (turn/steer).
				turns++
				held := "turn-" + strconv.Itoa(turns)
				send(map[string]any{"method": "turn/started", "params": map[string]any{"threadId": p.ThreadID, "turn": map[string]any{"id": held, "status": "inProgress"}}})
				continue
			}
			if text == "ask" {
				asked = p.ThreadID
				send(map[string]any{"id": 900, "method": "item/commandExecution/requestApproval", "params": map[string]any{"threadId": p.ThreadID}})
				continue
			}
			turn(p.ThreadID, text)
		case msg.Method == "turn/steer":
			var st struct {
				ThreadID       string `json:"threadId"`
				ExpectedTurnID string `json:"expectedTurnId"`
				Input          []struct {
					Text string `json:"text"`
				} `json:"input"`
			}
			json.Unmarshal(msg.Params, &st)
			send(map[string]any{"id": msg.ID, "result": map[string]any{"turnId": st.ExpectedTurnID}})
			send(map[string]any{"method": "item/completed", "params": map[string]any{"threadId": st.ThreadID, "turnId": st.ExpectedTurnID,
				"item": map[string]any{"type": "agentMessage", "id": "msg-steer", "text": fmt.Sprintf("fake %d: steered %s", n, st.Input[0].Text)}}})
			send(map[string]any{"method": "turn/completed", "params": map[string]any{"threadId": st.ThreadID, "turn": map[string]any{"id": st.ExpectedTurnID, "status": "completed"}}})
		case msg.ID != nil && msg.Method != "":
			send(map[string]any{"id": msg.ID, "result": map[string]any{}})
		}
	}
	return 0
}
