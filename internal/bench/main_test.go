package bench

import (
	"os"
	"testing"

	"github.com/vigilrun/vigil/internal/sandbox"
)

// TestMain lets the test binary be the sandbox's launcher when commands
// are confined by Landlock (it re-executes itself; see sandbox.Main):
// the wake figures run shell commands.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
