package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCover checks the Landlock read rules around hidden paths: every
// sibling along the way is granted whole, the hidden paths and the links
// are not, and the directories between get listing only.
func TestCover(t *testing.T) {
	d := t.TempDir()
	for _, p := range []string{"a/secret/x", "a/keep/y", "b/z", "c/w"} {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "a", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/secret", filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	full, partial := cover(d, []string{filepath.Join(d, "a", "secret"), filepath.Join(d, "b")})
	slices.Sort(full)
	wantFull := []string{filepath.Join(d, "a", "f"), filepath.Join(d, "a", "keep"), filepath.Join(d, "c")}
	if !slices.Equal(full, wantFull) {
		t.Errorf("full = %q, want %q", full, wantFull)
	}
	if want := []string{d, filepath.Join(d, "a")}; !slices.Equal(partial, want) {
		t.Errorf("partial = %q, want %q", partial, want)
	}
	if full, partial := cover(d, nil); !slices.Equal(full, []string{d}) || partial != nil {
		t.Errorf("nothing hidden: %q, %q", full, partial)
	}
}

// TestSeccompFilter checks that every variant assembles and ends with the
// kill for a foreign architecture.
func TestSeccompFilter(t *testing.T) {
	if _, ok := auditArch(); !ok {
		t.Skip("no filter for this architecture")
	}
	for _, v := range []struct{ network, unix bool }{{true, true}, {false, true}, {false, false}} {
		f, err := seccompFilter(v.network, v.unix)
		if err != nil {
			t.Fatalf("%+v: %v", v, err)
		}
		if last := f[len(f)-1]; last.K != unix.SECCOMP_RET_KILL_PROCESS {
			t.Errorf("%+v: last instruction %+v", v, last)
		}
		if f[1].Jf == 0 {
			t.Errorf("%+v: the architecture check falls through", v)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a", true}, {"/ab", "/a", false}, {"/x", "/", true},
	} {
		if got := within(c.path, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v", c.path, c.dir, got)
		}
	}
}
