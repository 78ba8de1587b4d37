package vigil_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/vigilrun/vigil"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
	"github.com/vigilrun/vigil/store/memstore"
)

// Tell a session's events for people, as 'vigil run' and 'vigil logs'
// print them (here without the times).
func ExampleTimeline() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "vigil-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sc, err := script.Parse([]byte("name: hello\nagents:\n  main:\n    turns: [{say: \"Hello, {{.Input}}.\"}]\n"))
	if err != nil {
		log.Fatal(err)
	}
	st := memstore.New()
	defer st.Close()
	rt, err := vigil.Open(ctx, vigil.Options{
		Store: st, Providers: map[string]provider.Provider{"script": script.New(sc, nil)}, DefaultProvider: "script",
		DataDir: dir, NewID: func() string { return "s1" },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	sess, err := rt.CreateSession(ctx, &vigil.SessionParams{Prompt: "world"})
	if err != nil {
		log.Fatal(err)
	}
	if err := rt.WaitQuiescent(ctx, sess.ID); err != nil {
		log.Fatal(err)
	}
	events, err := rt.EventList(ctx, sess.ID, 0)
	if err != nil {
		log.Fatal(err)
	}
	tl := vigil.NewTimeline()
	for _, e := range events {
		line, ok, err := tl.Line(e)
		if err != nil {
			log.Fatal(err)
		}
		if ok {
			fmt.Printf("%-4s %s\n", line.Who, line.Text)
		}
	}
	// Output:
	// ·    session s1 created
	// main run 1 started (prompt)
	// main run 1 completed: Hello, world.
}
