package server

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server, stream, connection and runtime a test starts must be stopped by
// its end. With sseClientsEnv set the binary is instead a benchmark's
// event-stream clients (sseClientsMain).
func TestMain(m *testing.M) {
	if urls := os.Getenv(sseClientsEnv); urls != "" {
		os.Exit(sseClientsMain(urls))
	}
	goleak.VerifyTestMain(m)
}
