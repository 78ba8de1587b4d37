package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// wait's subscription, a connection's server or a runtime's actor that
// nobody stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
