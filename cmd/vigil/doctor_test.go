package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/internal/doctor/t3code/t3test"
	"github.com/vigilrun/vigil/internal/pgtest"
)

// runDoctor runs "vigil doctor args..." and
// returns its exit code and output; vars is its environment.
func runDoctor(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code := runMain(context.Background(), e, append([]string{"doctor"}, args...))
	return code, out.String(), errb.String()
}

// dirHashes hashes every file of a directory.
func dirHashes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, before, after map[string][32]byte) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("files changed: %d before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s changed", k)
		}
	}
}

// doctorJSON is what a script reads of --json.
type doctorJSON struct {
	Read     []string `json:"read"`
	Sessions int      `json:"sessions"`
	Findings []struct {
		Kind     string    `json:"kind"`
		Source   string    `json:"source"`
		Session  string    `json:"session"`
		Start    time.Time `json:"start"`
		Stall    int64     `json:"stall_ns"`
		Evidence []struct {
			Row, Text, Why string
		} `json:"evidence"`
		Item string `json:"item"`
	} `json:"findings"`
}

func decodeDoctor(t *testing.T, out string) doctorJSON {
	t.Helper()
	var d doctorJSON
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("--json wrote more than one object:\n%s", out)
	}
	if !strings.Contains(out, `"findings": [`) {
		t.Fatalf("no findings array:\n%s", out)
	}
	return d
}

// TestDoctorVigilStore runs a real session with vigil run into a data
// directory and checks that vigil doctor --data finds nothing in it, in
// text and in JSON, exits 0, and leaves every file of the directory as it
// was.
func TestDoctorVigilStore(t *testing.T) {
	data := t.TempDir()
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	scenario := filepath.Join("..", "..", "internal", "doctor", "vigilstore", "testdata", "coordinator.yaml")
	if code := runMain(context.Background(), e, []string{"run", "--data", data, "--script", scenario, "--permission-mode", "bypass", "Build the release"}); code != 0 {
		t.Fatalf("vigil run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "changelog written") {
		t.Fatalf("the session did not run its messages:\n%s", out.String())
	}
	before := dirHashes(t, data)
	code, text, errs := runDoctor(t, nil, "--data", data)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d: %s%s", code, text, errs)
	}
	if !strings.HasPrefix(text, "read 1 file(s), 1 session(s): nothing found\n") {
		t.Fatalf("text:\n%s", text)
	}
	code, js, errs := runDoctor(t, nil, "--data", data, "--json")
	if code != 0 || errs != "" {
		t.Fatalf("--json: exit %d: %s", code, errs)
	}
	d := decodeDoctor(t, js)
	if d.Sessions != 1 || len(d.Findings) != 0 || len(d.Read) != 1 || d.Read[0] != filepath.Join(data, "vigil.db") {
		t.Fatalf("--json: %+v", d)
	}
	sameFiles(t, before, dirHashes(t, data))
}

// TestDoctorT3 reads a T3 Code database with each failure of seed 002 in
// it: exit 1, the findings in text and in JSON, the file unchanged.
func TestDoctorT3(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "statev2.sqlite")
	if err := t3test.Build(context.Background(), db, t3test.Healthy, t3test.HeldContinuation, t3test.StuckSubagents); err != nil {
		t.Fatal(err)
	}
	before := dirHashes(t, dir)
	code, text, errs := runDoctor(t, nil, "--t3", db)
	if code != 1 || errs != "" {
		t.Fatalf("exit %d: %s%s", code, text, errs)
	}
	for _, want := range []string{
		"read 1 file(s), 4 session(s): 3 finding(s)",
		"held-continuation  t3code session " + t3test.HeldThread,
		"stuck-subagent  t3code session " + t3test.StuckThread,
		"what to do: cancel the held continuation run:" + t3test.HeldThread + ":32",
		"recovered reply:\n     | Docs migrated",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}
	t.Logf("vigil doctor --t3:\n%s", text)
	code, js, _ := runDoctor(t, nil, "--t3", db, "--json")
	if code != 1 {
		t.Fatalf("--json: exit %d", code)
	}
	d := decodeDoctor(t, js)
	var kinds []string
	for _, f := range d.Findings {
		kinds = append(kinds, f.Kind)
		if f.Source != "t3code" || f.Session == "" || f.Start.IsZero() || len(f.Evidence) == 0 || f.Item == "" {
			t.Fatalf("finding lacks what a script needs: %+v", f)
		}
	}
	if strings.Join(kinds, " ") != "held-continuation stuck-subagent stuck-subagent" {
		t.Fatalf("kinds %v", kinds)
	}
	sameFiles(t, before, dirHashes(t, dir))
}

// TestDoctorDefaults reads T3 Code's database where T3 Code keeps it when
// no source is given, and says what it looked for when nothing is there.
func TestDoctorDefaults(t *testing.T) {
	home := t.TempDir()
	vars := map[string]string{"HOME": home}
	code, _, errs := runDoctor(t, vars)
	if code != 2 || !strings.Contains(errs, "nothing to read: "+filepath.Join(home, ".claude", "projects")+" and "+filepath.Join(home, ".t3", "userdata", "statev2.sqlite")+" not found") {
		t.Fatalf("empty home: exit %d, %q", code, errs)
	}
	t3home := filepath.Join(home, "t3")
	if err := os.MkdirAll(filepath.Join(t3home, "userdata"), 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t3home, "userdata", "statev2.sqlite")
	if err := t3test.Build(context.Background(), db, t3test.Healthy); err != nil {
		t.Fatal(err)
	}
	vars["T3CODE_HOME"] = t3home
	code, text, errs := runDoctor(t, vars)
	if code != 0 || errs != "" || !strings.HasPrefix(text, "read 1 file(s), 1 session(s): nothing found") {
		t.Fatalf("T3CODE_HOME: exit %d: %s%s", code, text, errs)
	}
	// And ~/.claude/projects beside it, with a sample session in it.
	sample := filepath.Join(claudeSamples, "bg_bash", "a88d1398-d0af-412a-a73f-d3ba2dced3a7.trimmed.jsonl")
	b, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(home, ".claude", "projects", "-work-demo")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "a88d1398-d0af-412a-a73f-d3ba2dced3a7.jsonl"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	code, text, errs = runDoctor(t, vars)
	if code != 0 || errs != "" || !strings.HasPrefix(text, "read 2 file(s), 2 session(s): nothing found") {
		t.Fatalf("both defaults: exit %d: %s%s", code, text, errs)
	}
	// With CLAUDE_CONFIG_DIR the CLI writes its projects there, and doctor
	// reads them there: an empty one leaves only T3's database.
	vars["CLAUDE_CONFIG_DIR"] = t.TempDir()
	if err := os.MkdirAll(filepath.Join(vars["CLAUDE_CONFIG_DIR"], "projects"), 0o700); err != nil {
		t.Fatal(err)
	}
	code, text, errs = runDoctor(t, vars)
	if code != 0 || errs != "" || !strings.HasPrefix(text, "read 1 file(s), 1 session(s): nothing found") {
		t.Fatalf("CLAUDE_CONFIG_DIR: exit %d: %s%s", code, text, errs)
	}
}

// TestDoctorUsage checks the errors of a wrong command line (exit 2) and
// of a source that cannot be read (exit 3).
func TestDoctorUsage(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	junk := filepath.Join(dir, "junk.sqlite")
	if err := os.WriteFile(junk, []byte("this is not a database, not even close; SQLite wants its header\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--data", missing}, 2, "vigil doctor: --data " + missing + ": no such directory\n"},
		{[]string{"--data", dir}, 2, "--data " + dir + ": no vigil store there (" + filepath.Join(dir, "vigil.db") + " does not exist)"},
		{[]string{"--claude", missing}, 2, "--claude " + missing + ": no such directory or file"},
		{[]string{"--t3", missing}, 2, "--t3 " + missing + ": no such file"},
		{[]string{"--data", junk}, 2, "not a directory"},
		{[]string{"--store", "sqlite:///x.db"}, 2, "want a postgres:// URL"},
		{[]string{"--stall", "0s", "--t3", junk}, 2, "--stall 0s: want a positive duration"},
		{[]string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"somewhere"}, 2, "unexpected argument \"somewhere\""},
		{[]string{"--t3", junk}, 3, "read the T3 Code database " + junk + ":"},
	} {
		code, out, errs := runDoctor(t, nil, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errs, c.code, c.want)
		}
	}
	code, _, errs := runDoctor(t, nil, "-h")
	if code != 0 || !strings.Contains(errs, "Exit status: 0 when nothing is found, 1 when something is") {
		t.Fatalf("-h: exit %d\n%s", code, errs)
	}
}

// TestDoctorClaudeSamples reads the sample Claude Code sessions (copies
// of the design notes' claude-code-transcripts, kept in the claudecode
// reader's testdata) through --claude: the command reads every one and its
// exit code agrees with its findings.
func TestDoctorClaudeSamples(t *testing.T) {
	dir := claudeSamples
	before := dirHashes(t, dir)
	code, js, errs := runDoctor(t, nil, "--claude", dir, "--json")
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	d := decodeDoctor(t, js)
	if len(d.Read) < 4 || d.Sessions < 4 {
		t.Fatalf("read %d file(s), %d session(s): %v", len(d.Read), d.Sessions, d.Read)
	}
	if (code == 1) != (len(d.Findings) > 0) {
		t.Fatalf("exit %d with %d finding(s)", code, len(d.Findings))
	}
	for _, f := range d.Findings {
		if f.Source != "claude-code" || f.Session == "" || len(f.Evidence) == 0 {
			t.Fatalf("finding: %+v", f)
		}
	}
	code, text, _ := runDoctor(t, nil, "--claude", dir)
	t.Logf("vigil doctor --claude (exit %d):\n%s", code, text)
	sameFiles(t, before, dirHashes(t, dir))
}

// claudeSamples holds copies of the design notes' sample Claude Code
// sessions, in the claudecode reader's testdata.
var claudeSamples = filepath.Join("..", "..", "internal", "doctor", "claudecode", "testdata", "samples")

// TestDoctorPostgresStore runs a real session on PostgreSQL with vigil run
// --db and reads it back with vigil doctor --store: nothing is found.
func TestDoctorPostgresStore(t *testing.T) {
	dsn := pgtest.Fresh(t)
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	scenario := filepath.Join("..", "..", "internal", "doctor", "vigilstore", "testdata", "coordinator.yaml")
	if code := runMain(context.Background(), e, []string{"run", "--db", dsn, "--data", t.TempDir(), "--script", scenario, "--permission-mode", "bypass", "Build the release"}); code != 0 {
		t.Fatalf("vigil run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	code, js, errs := runDoctor(t, nil, "--store", dsn, "--json")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d: %s%s", code, js, errs)
	}
	d := decodeDoctor(t, js)
	if d.Sessions != 1 || len(d.Findings) != 0 || len(d.Read) != 1 || d.Read[0] != pgtest.Redact(dsn) {
		t.Fatalf("%+v", d)
	}
}
