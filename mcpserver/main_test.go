package mcpserver_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// wait's subscription, a connection's server or a runtime's actor that
// nobody stopped.
func TestMain(m *testing.M) {
	sandbox.Main() // the tests' commands run in the sandbox
	goleak.VerifyTestMain(m)
}
