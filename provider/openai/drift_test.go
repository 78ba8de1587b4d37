package openai

import (
	"os"
	"strings"
	"testing"
)

// retry.go is shared with provider/anthropic by copy; keep the copies equal.
func TestRetryFileMatchesAnthropic(t *testing.T) {
	for _, name := range []string{"retry.go", "retry_test.go"} {
		ours, err1 := os.ReadFile(name)
		theirs, err2 := os.ReadFile("../anthropic/" + name)
		if err1 != nil || err2 != nil {
			t.Skipf("cannot read the copies: %v %v", err1, err2)
		}
		if strings.Replace(string(theirs), "package anthropic\n", "package openai\n", 1) != string(ours) {
			t.Errorf("%s differs from ../anthropic/%s", name, name)
		}
	}
}
