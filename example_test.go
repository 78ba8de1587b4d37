package vigil_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
	"github.com/vigilrun/vigil/store/sqlite"
)

// A scripted model for the examples: the main agent starts a background
// worker and is woken by its notification.
const scenario = `
name: example
agents:
  main:
    turns:
      - say: "Starting a worker."
        tools:
          - Agent: {name: w1, description: "the work", prompt: "Do: {{.Input}}", run_in_background: true}
      - say: "The worker runs in the background."
    on:
      notification:
        - say: "w1 reported: {{.Notification.Result}}"
  w1:
    turns:
      - say: "done"
`

// Open a runtime on a SQLite store, create a session with a prompt, and
// wait until it has nothing left to do. This is the README's embedding
// example.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "vigil-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, filepath.Join(dir, "vigil.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	sc, err := script.Parse([]byte(scenario))
	if err != nil {
		log.Fatal(err)
	}
	rt, err := vigil.Open(ctx, vigil.Options{
		Store:           st,
		Providers:       map[string]provider.Provider{"script": script.New(sc, nil)},
		DefaultProvider: "script",
		DataDir:         dir,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "Build the release"})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		log.Fatal(err)
	}
	main, err := rt.AgentGet(ctx, sess.ID, "main")
	if err != nil {
		log.Fatal(err)
	}
	for _, run := range main.RunHistory {
		fmt.Printf("run %d (%s): %s\n", run.Seq, run.Kind, run.Reply)
	}
	// Output:
	// run 1 (prompt): The worker runs in the background.
	// run 2 (notification): w1 reported: done
}

// Subscribe streams a session's committed events, from the start or from
// a position, then live ones: here until the session is quiescent.
func ExampleRuntime_Subscribe() {
	ctx := context.Background()
	rt, id, done := exampleSession(ctx)
	defer done()

	sub, err := rt.Subscribe(ctx, &vigil.SubscribeParams{Session: id})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for ev := range sub.C {
		if ev.Type == "notification.written" {
			fmt.Println(ev.Type)
			break
		}
	}
	// Output:
	// notification.written
}

// Prompt queues a prompt; Message sends to an agent and answers with the
// message's outcome at once.
func ExampleRuntime_Message() {
	ctx := context.Background()
	rt, id, done := exampleSession(ctx)
	defer done()
	if err := rt.WaitQuiescent(ctx, id); err != nil {
		log.Fatal(err)
	}
	m, err := rt.Message(ctx, id, &vigil.MessageParams{To: "nobody", Text: "hello?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Outcome, "-", m.Reason)
	if _, err := rt.Prompt(ctx, "no-such-session", &vigil.PromptParams{Text: "hi"}); err != nil {
		fmt.Println(vigil.CodeOf(err))
	}
	// Output:
	// rejected - no agent "nobody" in this session
	// not_found
}

// exampleSession opens a runtime on an in-memory store and starts the
// scenario's session; done closes the runtime and removes its directory.
func exampleSession(ctx context.Context) (rt *vigil.Runtime, id vigil.SessionID, done func()) {
	sc, err := script.Parse([]byte(scenario))
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "vigil-example")
	if err != nil {
		log.Fatal(err)
	}
	rt, err = vigil.Open(ctx, vigil.Options{
		Store:     memstore.New(),
		Providers: map[string]provider.Provider{"script": script.New(sc, nil)}, DefaultProvider: "script", DataDir: dir,
	})
	if err != nil {
		log.Fatal(err)
	}
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "Build the release"})
	if err != nil {
		log.Fatal(err)
	}
	return rt, sess.ID, func() { rt.Close(); os.RemoveAll(dir) }
}
