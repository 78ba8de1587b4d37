package server

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server, stream, connection and runtime a test starts must be stopped by
// its end. With sseClientsEnv set the binary is instead a benchmark's
// event-stream clients (sseClientsMain).
func TestMain(m *testing.M) {
	sandbox.Main() // the tests' commands run in the sandbox
	if urls := os.Getenv(sseClientsEnv); urls != "" {
		os.Exit(sseClientsMain(urls))
	}
	goleak.VerifyTestMain(m)
}
