package claudecode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// The test binary doubles as a fake CLI for the process tests: run with
// FAKE_CLAUDE=1 it plays a few scripted behaviours instead of the tests.
func TestMain(m *testing.M) {
	sandbox.Main() // the tests' commands run in the sandbox
	if os.Getenv("FAKE_CLAUDE") == "1" {
		os.Exit(fakeCLI())
	}
	if findCLI() == "" {
		fmt.Fprintln(os.Stderr, "\n**********\n"+skipMessage+"\n**********")
	}
	os.Exit(m.Run())
}

// fakeCLI records its command line and environment in $FAKE_ARGS (one
// entry a line), then reads stream-json lines from stdin:
//   - a control request is answered with success;
//   - the user message "replay" prints the lines of $FAKE_SCRIPT;
//   - "ask" sends a permission request (can_use_tool), "ask-other" a
//     control request of another kind; each reports the answer it got in
//     a result frame (its error, empty for a success);
//   - "crash" writes to stderr and exits with status 3;
//   - "stubborn" ignores SIGTERM and stdin's end from then on;
//   - "detach N" starts "setsid -f sleep N", which leaves the CLI's
//     process group and session.
//
// At the end of stdin it exits 0.
func fakeCLI() int {
	if path := os.Getenv("FAKE_ARGS"); path != "" {
		rec := append(append([]string{}, os.Args[1:]...), "--env--")
		rec = append(rec, os.Environ()...)
		os.WriteFile(path, []byte(strings.Join(rec, "\n")), 0o600)
	}
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	stubborn := false
	for in.Scan() {
		var l struct {
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
			Message   struct {
				Content string `json:"content"`
			} `json:"message"`
			Response struct {
				Error string `json:"error"`
			} `json:"response"`
		}
		if json.Unmarshal(in.Bytes(), &l) != nil {
			fmt.Fprintln(os.Stderr, "Error parsing streaming input line")
			return 1
		}
		switch {
		case l.Type == "control_request":
			fmt.Fprintf(out, `{"type":"control_response","response":{"subtype":"success","request_id":%q,"response":{}}}`+"\n", l.RequestID)
		case l.Type == "control_response":
			fmt.Fprintf(out, `{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":%q}`+"\n", "answer: "+l.Response.Error)
		case l.Message.Content == "replay":
			b, err := os.ReadFile(os.Getenv("FAKE_SCRIPT"))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			out.Write(b)
		case l.Message.Content == "ask":
			fmt.Fprintln(out, `{"type":"control_request","request_id":"cli-1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"toolu_1"}}`)
		case l.Message.Content == "ask-other":
			fmt.Fprintln(out, `{"type":"control_request","request_id":"cli-2","request":{"subtype":"initialize"}}`)
		case l.Message.Content == "crash":
			out.Flush()
			fmt.Fprintln(os.Stderr, "fatal: something broke")
			return 3
		case strings.HasPrefix(l.Message.Content, "detach "):
			// A command the CLI ran that left its process group and session.
			cmd := exec.Command("setsid", "-f", "sleep", strings.TrimPrefix(l.Message.Content, "detach "))
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(out, `{"type":"result","subtype":"success","num_turns":1,"result":"detached"}`)
		case l.Message.Content == "stubborn":
			stubborn = true
			signal.Ignore(syscall.SIGTERM)
			fmt.Fprintln(out, `{"type":"system","subtype":"status","status":"stubborn"}`)
			fmt.Fprintln(out, `{"type":"result","subtype":"success","num_turns":1,"result":"stubborn"}`)
		}
		out.Flush()
	}
	if stubborn {
		select {}
	}
	return 0
}
