package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/vigilrun/vigil/examples"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/script"
)

// providerFlags choose the model provider.
type providerFlags struct {
	name   string
	model  string
	script string
}

func (f *providerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "provider", "", "model provider: script (default when no API key is set)")
	fs.StringVar(&f.model, "model", "", "model name")
	fs.StringVar(&f.script, "script", "", "scenario file for the script provider (default: the built-in coordinator demo)")
}

// providerSet is what a command runs sessions with.
type providerSet struct {
	providers map[string]provider.Provider
	name      string
	note      string // told to the user, e.g. that the demo script is used
}

func (f *providerFlags) build(e *env, logger *slog.Logger) (*providerSet, error) {
	name := f.name
	if f.script != "" && name == "" {
		name = "script"
	}
	if name == "" {
		name = "script"
	}
	set := &providerSet{providers: map[string]provider.Provider{}, name: name}
	switch name {
	case "script":
		var sc *script.Scenario
		var err error
		if f.script != "" {
			sc, err = script.Load(f.script)
		} else {
			var b []byte
			if b, err = examples.Files.ReadFile("coordinator.yaml"); err == nil {
				sc, err = script.Parse(b)
			}
			set.note = "(no API key and no --script: running the built-in coordinator scenario)"
		}
		if err != nil {
			return nil, err
		}
		set.providers["script"] = script.New(sc, &script.Options{Logger: logger})
	default:
		return nil, fmt.Errorf("unknown provider %q", name)
	}
	return set, nil
}
