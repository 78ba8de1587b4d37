package server

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// server, stream, connection and runtime a test starts must be stopped by
// its end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
