package permission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func filePath(p string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"file_path": p, "content": "x"})
	return b
}

// DecideIn matches a path by its names under the roots: absolute inside
// the first root by its relative form, climbing out and back in by where it
// lands; Decide, without roots, cannot.
func TestDecideInMatchesPathsUnderTheRoots(t *testing.T) {
	roots := []string{"/w/proj", "/w/extra"}
	cases := []struct {
		name        string
		mode        string
		allow, deny []string
		tool, path  string
		want        Decision // DecideIn's
		decide      Decision // Decide's
	}{
		{"absolute denied by relative rule", ModeAsk, nil, []string{"Read(secrets/*)"}, "Read", "/w/proj/secrets/x", Deny, Allow},
		{"absolute allowed by relative rule", ModeAsk, []string{"Write(src/*)"}, nil, "Write", "/w/proj/src/a.go", Allow, Ask},
		{"absolute in another root not allowed by a relative rule", ModeAsk, []string{"Write(src/*)"}, nil, "Write", "/w/extra/src/a.go", Ask, Ask},
		{"but denied by a relative rule there", ModeAsk, nil, []string{"Read(secrets/*)"}, "Read", "/w/extra/secrets/x", Deny, Allow},
		{"relative denied by absolute rule", ModeAsk, nil, []string{"Read(/w/proj/secrets/*)"}, "Read", "secrets/x", Deny, Allow},
		{"relative allowed by absolute rule", ModeAuto, []string{"Write(/w/proj/src/*)"}, nil, "Write", "src/a.go", Allow, Deny},
		{"climbing out and back in", ModeAsk, nil, []string{"Read(secrets/*)"}, "Read", "../proj/secrets/x", Deny, Allow},
		{"climbing out and back in allowed", ModeAuto, []string{"Write(src/*)"}, nil, "Write", "../proj/src/a.go", Allow, Deny},
		{"climbing out stays out", ModeAuto, []string{"Write(*)"}, nil, "Write", "../other/a.go", Deny, Deny},
		{"dotdot inside", ModeAuto, []string{"Write(src/*)"}, nil, "Write", "src/../.git/config", Deny, Deny},
		{"dot slash", ModeAsk, nil, []string{"Read(secrets/*)"}, "Read", "./secrets//x", Deny, Deny},
		{"directory rule covers what is under it", ModeBypass, nil, []string{"Write(.git)"}, "Write", ".git/hooks/pre-commit", Deny, Deny},
		{"read deny covers grep", ModeAsk, nil, []string{"Read(secrets/*)"}, "Grep", "secrets/x", Deny, Deny},
		{"edit deny covers write", ModeBypass, nil, []string{"Edit(.git/*)"}, "Write", ".git/config", Deny, Deny},
		{"write deny covers edit", ModeBypass, nil, []string{"Write(.git/*)"}, "Edit", ".git/config", Deny, Deny},
		{"read deny does not cover write", ModeBypass, nil, []string{"Read(secrets/*)"}, "Write", "secrets/x", Allow, Allow},
		{"allow is exact on the tool", ModeAuto, []string{"Write(src/*)"}, nil, "Edit", "src/a.go", Deny, Deny},
	}
	for _, c := range cases {
		input := filePath(c.path)
		if c.tool == "Grep" {
			input, _ = json.Marshal(map[string]string{"pattern": "x", "path": c.path})
		}
		if got, reason := DecideIn(roots, c.mode, c.allow, c.deny, c.tool, input); got != c.want {
			t.Errorf("%s: DecideIn = %s (%s), want %s", c.name, got, reason, c.want)
		}
		if got, reason := Decide(c.mode, c.allow, c.deny, c.tool, input); got != c.decide {
			t.Errorf("%s: Decide = %s (%s), want %s", c.name, got, reason, c.decide)
		}
	}
}

func TestPathIn(t *testing.T) {
	for _, c := range []struct {
		roots []string
		p     string
		want  Path
	}{
		{nil, "src/a", Path{Rel: "src/a", Other: []string{"src/a"}}},
		{nil, "/x/a", Path{Abs: []string{"/x/a"}, Other: []string{"/x/a"}}},
		{nil, "../a", Path{Other: []string{"../a", "../a"}}},
		{[]string{"/w"}, "./src//a", Path{Rel: "src/a", Abs: []string{"/w/src/a"}, Other: []string{"./src//a"}}},
		{[]string{"/w"}, "/w", Path{Rel: ".", Abs: []string{"/w"}, Other: []string{"/w"}}},
		{[]string{"/w", "/v"}, "/v/s/x", Path{Abs: []string{"/v/s/x"}, Other: []string{"/v/s/x", "s/x"}}},
		{[]string{"/w"}, "../v", Path{Abs: []string{"/v"}, Other: []string{"../v", "../v"}}},
		{[]string{"/"}, "etc/x", Path{Rel: "etc/x", Abs: []string{"/etc/x"}, Other: []string{"etc/x"}}},
	} {
		got := PathIn(c.roots, c.p)
		if got.Rel != c.want.Rel || !slices.Equal(got.Abs, c.want.Abs) || !slices.Equal(got.Other, c.want.Other) {
			t.Errorf("PathIn(%q, %q) = %+v, want %+v", c.roots, c.p, got, c.want)
		}
	}
}

// DecidePath and Denied on a resolved path: what the file tools use.
func TestDecidePath(t *testing.T) {
	p := Path{Rel: ".git/config", Abs: []string{"/w/.git/config"}}
	v := DecidePath(ModeAsk, []string{"Write(src/*)"}, nil, "Write", p)
	if v.Decision != Ask || v.Rule != "" {
		t.Fatalf("resolved .git/config under Write(src/*) = %+v", v)
	}
	v = DecidePath(ModeAsk, []string{"Write(src/*)"}, nil, "Write", Path{Rel: "src/gitlink/config"})
	if v.Decision != Allow || v.Rule != "Write(src/*)" {
		t.Fatalf("as written = %+v", v)
	}
	if rule, ok := Denied([]string{"Bash(rm *)", "Read(/w/.git/*)"}, "Glob", p); !ok || rule != "Read(/w/.git/*)" {
		t.Fatalf("Denied = %q, %v", rule, ok)
	}
	if rule, ok := Denied([]string{"Read(src/*)"}, "Read", p); ok {
		t.Fatalf("Denied = %q", rule)
	}
	// A Rel that climbs (a caller's mistake) allows nothing.
	if v := DecidePath(ModeAuto, []string{"Write(*)"}, nil, "Write", Path{Rel: "../x"}); v.Decision == Allow {
		t.Fatalf("climbing Rel allowed: %+v", v)
	}
}

// The rm variants of the attack that a pattern can see are denied by
// Bash(rm *); the ones it cannot are listed, so that the day they are
// caught the test says so.
func TestBashDenyUnwraps(t *testing.T) {
	deny := []string{"Bash(rm *)", "Bash(/usr/bin/curl *)"}
	caught := []string{
		"rm -rf x", "/bin/rm -rf x", `\rm -rf x`, `"rm" -rf x`, "r''m -rf x", `'r'm -rf x`,
		"command rm -rf x", "env rm -rf x", "env -i FOO=1 rm -rf x", "ls | xargs rm -rf", "ls | xargs -I{} rm -rf {}",
		"eval rm -rf x", `eval "rm -rf x"`, `bash -c "rm -rf x"`, "sh -c 'rm -rf x; ls'", "sudo -u root rm -rf x",
		"FOO=1 rm -rf x", "nohup /bin/rm -rf x &", "timeout 5 rm -rf x", "find . -name x -exec rm -f {} +",
		"exec rm -rf x", "echo $(rm -rf x)", "echo `rm -rf x`", "true && rm -rf x", "if true; then rm -rf x; fi",
		"curl http://x", "/usr/bin/curl http://x", "env curl http://x",
	}
	for _, cmd := range caught {
		if d, reason := Decide(ModeBypass, nil, deny, "Bash", bashInput(cmd)); d != Deny {
			t.Errorf("%q: %s (%s), want deny", cmd, d, reason)
		}
	}
	beyond := []string{"X=rm; $X -rf x", "printf 'rm -rf x' | sh", `python3 -c "import shutil; shutil.rmtree('x')"`, "cp /bin/rm ./del && ./del -rf x"}
	for _, cmd := range beyond {
		if d, _ := Decide(ModeBypass, nil, deny, "Bash", bashInput(cmd)); d == Deny {
			t.Errorf("%q is now denied: move it to the caught list", cmd)
		}
	}
	t.Logf("Bash(rm *) deny: %d variants caught, %d known to get past a pattern", len(caught), len(beyond))
	// Unwrapping does not deny what only mentions rm.
	for _, cmd := range []string{"echo rm -rf x", "grep 'rm -rf' notes.txt", "git rm --cached x", "rmdir x", "ls -l | wc"} {
		if d, reason := Decide(ModeBypass, nil, deny, "Bash", bashInput(cmd)); d == Deny {
			t.Errorf("%q denied: %s", cmd, reason)
		}
	}
}

func bashInput(cmd string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"command": cmd})
	return b
}

func TestGrants(t *testing.T) {
	for _, c := range []struct {
		rule      string
		arbitrary bool
		says      string
	}{
		{"Bash(git *)", true, "alias"},
		{"Bash(git status)", true, "core.fsmonitor"},
		{"Bash", true, "every command"},
		{"Bash(*)", true, "every command"},
		{"Bash(env *)", true, "any command"},
		{"Bash(xargs *)", true, "any command"},
		{"Bash(find *)", true, "any command"},
		{"Bash(/usr/bin/python3 *)", true, "python3"},
		{"Bash(node script.js)", true, "node"},
		{"Bash(make test)", true, "workspace"},
		{"Bash(npm run *)", true, "workspace"},
		{"Bash(go test ./...)", true, "workspace"},
		{"Bash(FOO=1 sh -c *)", true, "sh"},
		{"Bash(ls *)", false, "chain"},
		{"Bash(wc -l notes.txt)", false, "exactly"},
		{"Write", true, ".git/config"},
		{"Write(*)", true, ".git/config"},
		{"Edit(.git/*)", true, ".git/config"},
		{"Write(/w/proj/*)", true, ".git/config"},
		{"Write(src/*)", false, "symlinks"},
		{"Read(secrets/*)", false, "adds nothing"},
		{"WebFetch", false, "every call"},
		{"Bash(git", false, "not a valid rule"},
	} {
		text, arbitrary := Grants(c.rule)
		if arbitrary != c.arbitrary || !strings.Contains(text, c.says) {
			t.Errorf("Grants(%q) = %q, %v; want %v and %q", c.rule, text, arbitrary, c.arbitrary, c.says)
		}
	}
}

// Long inputs are decided in bounded time: a launcher chain is unwrapped
// up to maxForms forms, and a deep path's directories are matched up to
// pathMax. (Matching every directory of a 100 kB path took 20 s.)
func TestLongInputs(t *testing.T) {
	deny := []string{"Bash(rm *)", "Read(abcdef)", "Read(zzz)"}
	chain := strings.Repeat("env ", maxForms-1) + "rm x"
	if d, _ := Decide(ModeBypass, nil, deny, "Bash", bashInput(chain)); d != Deny {
		t.Errorf("a chain of %d launchers hid rm: %s", maxForms-1, d)
	}
	// Past maxForms the chain is not unwrapped further, and that takes no
	// time either.
	Decide(ModeBypass, nil, []string{"Bash(*rm*x)"}, "Bash", bashInput(strings.Repeat("env ", 100000)+"y"))
	deep := strings.Repeat("abcdef/", 15000) + "x"
	if d, reason := DecideIn([]string{"/w"}, ModeBypass, nil, deny, "Read", filePath(deep)); d != Deny || !strings.Contains(reason, "Read(abcdef)") {
		t.Errorf("a deep path under a denied directory: %s (%s)", d, reason)
	}
	if d, reason := DecideIn([]string{"/w"}, ModeBypass, nil, deny[2:], "Read", filePath(deep)); d != Allow {
		t.Errorf("a deep path: %s (%s)", d, reason)
	}
}
