package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vigilrun/vigil"
)

// TestToolErr: every error code of the runtime answers with a text that
// says what happened and what to do.
func TestToolErr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string // a part of the text; empty: the error itself
	}{
		{nil, ""},
		{&vigil.Error{Code: vigil.CodeShuttingDown, Message: "runtime closed"}, "vigil is shutting down"},
		{&vigil.Error{Code: vigil.CodeMoved, Message: "session s1: session moved"}, "another vigil process holds it"},
		{&vigil.Error{Code: vigil.CodeRecovering, Message: "session s1: being recovered"}, "call again in a few seconds"},
		{&vigil.Error{Code: vigil.CodeUnavailable, Message: "store unavailable"}, "nothing of it was kept"},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), "interrupted: read: context deadline exceeded"},
		{context.Canceled, "interrupted: context canceled"},
		{&vigil.Error{Code: vigil.CodeBehind, Message: "fell behind"}, "fell behind; call again"},
		{&vigil.Error{Code: vigil.CodeNotFound, Message: "no agent \"x\""}, "no agent \"x\""},
		{&vigil.Error{Code: vigil.CodeInvalid, Message: "unknown provider \"nope\""}, "unknown provider \"nope\""},
		{&vigil.Error{Code: vigil.CodeConflict, Message: "already answered"}, "already answered"},
		{&vigil.Error{Code: vigil.CodeClosed, Message: "agent slow is closed"}, "agent slow is closed"},
		{errors.New("disk on fire"), "disk on fire"},
	} {
		got := toolErr(c.err)
		switch {
		case c.err == nil && got != nil:
			t.Errorf("toolErr(nil) = %v", got)
		case c.err != nil && (got == nil || !strings.Contains(got.Error(), c.want)):
			t.Errorf("toolErr(%v) [%s] = %v, want it to say %q", c.err, vigil.CodeOf(c.err), got, c.want)
		}
	}
}

func TestParseNoteKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]vigil.NotificationKey{"t1#2": {Task: "t1", Run: 2}, "t2#exit": {Task: "t2"}} {
		if got, err := parseNoteKey(in); err != nil || got != want {
			t.Errorf("parseNoteKey(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"#1", "t1#", "t1#0", "t1#x", "t1"} {
		if _, err := parseNoteKey(bad); err == nil {
			t.Errorf("parseNoteKey(%q) accepted", bad)
		}
	}
}
