package vigil

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// TestMain lets the test binary be the sandbox's launcher when commands
// are confined by Landlock (it re-executes itself; see sandbox.Main), and
// fails the package if any test leaves a goroutine behind: every runtime,
// subscription and command a test starts must be stopped by its end.
func TestMain(m *testing.M) {
	sandbox.Main()
	goleak.VerifyTestMain(m)
}
