package vigil

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// An agent's `env` shows an allowlist of vigil's environment and the names
// the configuration lists: never vigil's database address, its token, or
// variables whose names say they hold secrets (before, all of them were
// printed into the transcript).
func TestCommandsGetAnAllowlistedEnvironment(t *testing.T) {
	secrets := map[string]string{
		"VIGIL_DB": "postgres://vigil:hunter2@db/vigil", "DATABASE_URL": "postgres://app:pw1@db/app", "PASSWORD": "pw2",
		"SECRET": "pw3", "MY_PASSWD": "pw4", "SERVICE_CREDENTIALS": "pw5", "ANTHROPIC_API_KEY": "sk-pw6",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("GOFLAGS", "-mod=mod")
	sc, err := script.Parse([]byte(`
name: env
agents:
  main:
    turns:
      - tools:
          - Bash: {command: "env; echo BACKGROUND >&2"}
          - Bash: {command: "env > bg.env", run_in_background: true}
      - say: "done"
`))
	if err != nil {
		t.Fatal(err)
	}
	rt := openWith(t, memstore.New(), sc, func(o *Options) { o.CommandEnv = []string{"GOFLAGS"} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cwd := t.TempDir()
	sess, err := rt.CreateSession(ctx, &SessionParams{Prompt: "go", Cwd: cwd, Permissions: Permissions{Mode: PermBypass}})
	must(t, err)
	must(t, rt.WaitQuiescent(ctx, sess.ID))
	var tr bytes.Buffer
	must(t, rt.Transcript(ctx, &tr, &TranscriptParams{Session: sess.ID, Agent: "main"}))
	bg := readFile(t, cwd+"/bg.env")
	for _, out := range []string{tr.String(), bg} {
		for k, v := range secrets {
			if strings.Contains(out, v) || strings.Contains(out, k+"=") {
				t.Errorf("a command saw %s:\n%s", k, out)
			}
		}
		for _, want := range []string{"PATH=", "GOFLAGS=-mod=mod"} {
			if !strings.Contains(out, want) {
				t.Errorf("a command lacks %s:\n%s", want, out)
			}
		}
	}
	if _, err := Open(context.Background(), Options{Store: memstore.New(), CommandEnv: []string{"VIGIL_DB"}}); err == nil || !strings.Contains(err.Error(), "vigil's own setting") {
		t.Fatalf("Open with command_env VIGIL_DB: %v; want it refused", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
