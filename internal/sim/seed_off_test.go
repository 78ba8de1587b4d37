//go:build !seedbugs

package sim

import (
	"strings"
	"testing"
)

// The default build has no seed bug, and says how to get one.
func TestNoSeedBugsWithoutTheTag(t *testing.T) {
	if b := Bugs(); len(b) != 0 {
		t.Fatalf("the default build lists seed bugs: %v", b)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "-tags "+SeedBugsTag) {
			t.Fatalf("Run with Inject set: recovered %v", r)
		}
	}()
	Run(Options{Seed: 1, Inject: "notified-flag"})
}
