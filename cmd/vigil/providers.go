package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vigilrun/vigil/internal/config"
	"github.com/vigilrun/vigil/internal/examples"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/claudecode"
	"github.com/vigilrun/vigil/provider/codex"
	"github.com/vigilrun/vigil/provider/script"
)

// providerFlags choose the model provider.
type providerFlags struct {
	name   string
	model  string
	script string
}

func (f *providerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "provider", "", "model provider: anthropic, openai, claude-code, codex, script, or one named in the config file\n(default: the config's, else anthropic when ANTHROPIC_API_KEY is set, else openai when OPENAI_API_KEY is set, else the scripted demo)")
	fs.StringVar(&f.model, "model", "", "model name (default: the config's, else the provider's)")
	fs.StringVar(&f.script, "script", "", "scenario file for the script provider (default: the built-in coordinator demo)")
}

// providerSet is what a command runs sessions with.
type providerSet struct {
	providers     map[string]provider.Provider
	drivers       map[string]provider.SessionDriver
	name          string // the default provider
	model         string
	subagentModel string
	cfg           *config.Config
	note          string // told to the user, e.g. that the demo script is used
}

// build reads the configuration and makes the providers: the chosen one,
// every other configured one that has what it needs, and the script
// provider.
func (f *providerFlags) build(e *env, logger *slog.Logger) (*providerSet, error) {
	wd, _ := os.Getwd()
	cfg, err := config.Load(config.Env(e.getenv), config.Files(config.Env(e.getenv), wd)...)
	if err != nil {
		return nil, err
	}
	set := &providerSet{providers: map[string]provider.Provider{}, drivers: map[string]provider.SessionDriver{}, cfg: cfg, model: cfg.Model, subagentModel: cfg.SubagentModel}
	if f.model != "" {
		set.model = f.model
	}
	name := f.name
	if name == "" && f.script != "" {
		name = "script"
	}
	if name == "" {
		name = cfg.DefaultProvider()
	}
	if name == "" {
		name = "script"
	}
	set.name = name
	// The script provider: a scenario file, or the built-in demo.
	var sc *script.Scenario
	if f.script != "" {
		sc, err = loadScript(f.script)
	} else {
		var b []byte
		if b, err = examples.Files.ReadFile("coordinator.yaml"); err == nil {
			sc, err = script.Parse(b)
		}
		if name == "script" {
			set.note = "(no API key and no --script: running the built-in coordinator scenario)"
		}
	}
	if err != nil {
		return nil, err
	}
	set.providers["script"] = script.New(sc, &script.Options{Logger: logger})
	// Claude Code: a driver per provider of kind claude-code, and one named
	// claude-code when asked for by name.
	for _, n := range append(cfg.Names(), "claude-code") {
		pc, configured := cfg.Providers[n]
		if (configured && pc.Kind == "claude-code") || (!configured && n == "claude-code" && name == n) {
			set.drivers[n] = claudecode.New(claudecode.Options{Path: pc.Path, Model: pc.Model, PassEnv: cfg.CommandEnv, Logger: logger, IdleRelease: 10 * time.Minute})
		}
	}
	// Codex: a driver per provider of kind codex, and one named codex
	// when asked for by name.
	for _, n := range append(cfg.Names(), "codex") {
		pc, configured := cfg.Providers[n]
		if (configured && pc.Kind == "codex") || (!configured && n == "codex" && name == n) {
			key := cfg.APIKey(n)
			if !configured {
				key = e.getenv("OPENAI_API_KEY")
			}
			set.drivers[n] = codex.New(codex.Options{Path: pc.Path, Model: pc.Model, APIKey: key, APIKeyEnv: pc.APIKeyEnv, PassEnv: cfg.CommandEnv, Logger: logger, IdleRelease: 10 * time.Minute})
		}
	}
	if _, ok := set.drivers[name]; ok {
		return set, nil
	}
	if name != "script" {
		p, err := cfg.Build(name, logger)
		if err != nil {
			return nil, err
		}
		set.providers[name] = p
	}
	for _, other := range append(cfg.Names(), "anthropic", "openai") {
		if _, done := set.providers[other]; done {
			continue
		}
		if p, err := cfg.Build(other, logger); err == nil {
			set.providers[other] = p
		}
	}
	if _, ok := set.providers[name]; !ok {
		return nil, fmt.Errorf("unknown provider %q", name)
	}
	return set, nil
}

// loadScript reads a scenario file or, when no such file exists, the
// built-in example of that name: "runaway", "runaway.yaml" and
// "examples/runaway.yaml" all name internal/examples/runaway.yaml, so
// that the README's examples run from any directory.
func loadScript(name string) (*script.Scenario, error) {
	if _, err := os.Stat(name); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return script.Load(name)
	}
	base := strings.TrimSuffix(filepath.Base(name), ".yaml") + ".yaml"
	b, err := examples.Files.ReadFile(base)
	if err != nil {
		names, _ := fs.Glob(examples.Files, "*.yaml")
		for i := range names {
			names[i] = strings.TrimSuffix(names[i], ".yaml")
		}
		return nil, fmt.Errorf("script %s: no such file, and no built-in example of that name (built in: %s)", name, strings.Join(names, ", "))
	}
	return script.Parse(b)
}
