// Package config reads vigil's configuration: a file in the user's config
// directory, a project-local file that overrides it, and environment
// variables that override both. It builds the model providers from it.
//
// A config file (YAML) in the user's config directory:
//
//	provider: anthropic            # the default provider
//	model: claude-sonnet-4-5       # the main agent's model
//	subagent_model: claude-haiku-4-5
//	permission_mode: accept-edits
//	allow: ["Bash(go test *)"]
//	providers:
//	  anthropic: {base_url: "...", model: "..."}
//	  openai:    {base_url: "...", model: "..."}
//	  ollama:    {kind: openai, base_url: "http://localhost:11434/v1", model: "qwen2.5-coder"}
//
// A project's .vigil/config.yaml may set only provider, model,
// subagent_model and deny rules: a repository someone cloned must not pick
// the program vigil runs, the server an API key goes to, or looser
// permissions. API keys come from the environment (ANTHROPIC_API_KEY,
// OPENAI_API_KEY, or the variable a provider names in api_key_env), never
// from a file, and never appear in logs or errors.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/provider"
	"github.com/vigilrun/vigil/provider/anthropic"
	"github.com/vigilrun/vigil/provider/openai"
)

// Config is vigil's configuration.
type Config struct {
	Provider       string              `yaml:"provider"`
	Model          string              `yaml:"model"`
	SubagentModel  string              `yaml:"subagent_model"`
	PermissionMode string              `yaml:"permission_mode"`
	Allow          []string            `yaml:"allow"`
	Deny           []string            `yaml:"deny"`
	Providers      map[string]Provider `yaml:"providers"`
	// Server is the address of a running vigil serve, for the CLI client.
	Server string `yaml:"server"`
	// Retry shapes how an agent retries the items a run gave back when it
	// failed before its model saw them.
	Retry Retry `yaml:"retry"`
	// Sources lists the files read, in order.
	Sources []string `yaml:"-"`
}

// Provider configures one provider.
type Provider struct {
	// Kind is anthropic, openai or claude-code; it defaults to the
	// provider's name when that is one of them.
	Kind    string `yaml:"kind"`
	BaseURL string `yaml:"base_url"`
	Model   string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the key.
	APIKeyEnv string `yaml:"api_key_env"`
	// MaxTokens caps answers (anthropic: default 8192).
	MaxTokens int `yaml:"max_tokens"`
	// Path is the claude executable for kind claude-code.
	Path string `yaml:"path"`
	// apiKey is read from the environment, never from a file.
	apiKey string
}

// Retry is the retry policy of items a failed run gave back: the n-th
// retry waits Base×2^(n-1), at most MaxDelay; after Attempts failed runs
// the agent is blocked until a person retries. Zero values keep the
// defaults (2s, 5m, 5).
type Retry struct {
	Base     time.Duration `yaml:"base"`
	MaxDelay time.Duration `yaml:"max_delay"`
	Attempts int           `yaml:"attempts"`
}

// Core returns the core's settings that the config sets.
func (c *Config) Core() core.Config {
	if c == nil {
		return core.Config{}
	}
	return core.Config{RetryBase: c.Retry.Base, RetryMaxDelay: c.Retry.MaxDelay, RetryAttempts: c.Retry.Attempts}
}

// Env reads environment variables; os.Getenv in production.
type Env func(string) string

// File is a config file and whether it belongs to a project (and so is
// trusted only with what cannot run code, move keys or loosen
// permissions).
type File struct {
	Path    string
	Project bool
}

// Files returns the config files vigil reads, in order: the user's
// (XDG_CONFIG_HOME or ~/.config, /vigil/config.yaml), then the project's
// (.vigil/config.yaml in dir).
func Files(env Env, dir string) []File {
	var out []File
	base := env("XDG_CONFIG_HOME")
	if base == "" {
		if home := env("HOME"); home != "" {
			base = filepath.Join(home, ".config")
		}
	}
	if base != "" {
		out = append(out, File{Path: filepath.Join(base, "vigil", "config.yaml")})
	}
	if dir != "" {
		out = append(out, File{Path: filepath.Join(dir, ".vigil", "config.yaml"), Project: true})
	}
	return out
}

// projectConfig is what a project's config file may set: a repository
// someone cloned must not choose the program vigil runs, where an API key
// is sent, or looser permissions. Deny rules only tighten; they are added
// to the user's.
type projectConfig struct {
	Provider      string   `yaml:"provider"`
	Model         string   `yaml:"model"`
	SubagentModel string   `yaml:"subagent_model"`
	Deny          []string `yaml:"deny"`
}

// Load reads the files that exist, later ones overriding earlier ones
// field by field, then applies the environment: VIGIL_PROVIDER,
// VIGIL_MODEL, VIGIL_SUBAGENT_MODEL, ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
// and the API keys. A project file may set only provider (one the user's
// configuration defines or a built-in one), model, subagent_model and deny
// rules.
func Load(env Env, files ...File) (*Config, error) {
	c := &Config{Providers: map[string]Provider{}}
	for _, f := range files {
		b, err := os.ReadFile(f.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read config %s: %w", f.Path, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if f.Project {
			var p projectConfig
			if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("project config %s: %w (a project file may set only provider, model, subagent_model and deny; the rest belongs in your own ~/.config/vigil/config.yaml)", f.Path, err)
			}
			c.merge(&Config{Provider: p.Provider, Model: p.Model, SubagentModel: p.SubagentModel})
			c.Deny = append(c.Deny, p.Deny...)
		} else {
			var layer Config
			if err := dec.Decode(&layer); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("config %s: %w", f.Path, err)
			}
			c.merge(&layer)
		}
		c.Sources = append(c.Sources, f.Path)
	}
	if v := env("VIGIL_PROVIDER"); v != "" {
		c.Provider = v
	}
	if v := env("VIGIL_MODEL"); v != "" {
		c.Model = v
	}
	if v := env("VIGIL_SUBAGENT_MODEL"); v != "" {
		c.SubagentModel = v
	}
	for _, name := range []string{"anthropic", "openai"} {
		p := c.Providers[name]
		prefix := strings.ToUpper(name)
		if v := env(prefix + "_BASE_URL"); v != "" {
			p.BaseURL = v
		}
		if p.Kind == "" || p.Kind == name {
			c.Providers[name] = p
		}
	}
	for name, p := range c.Providers {
		if p.Kind == "" {
			p.Kind = name
		}
		keyEnv := p.APIKeyEnv
		if keyEnv == "" {
			switch p.Kind {
			case "anthropic":
				keyEnv = "ANTHROPIC_API_KEY"
			case "openai":
				if name == "openai" {
					keyEnv = "OPENAI_API_KEY"
				}
			}
		}
		if keyEnv != "" {
			p.apiKey = env(keyEnv)
		}
		c.Providers[name] = p
	}
	return c, c.validate()
}

func (c *Config) merge(o *Config) {
	if o.Provider != "" {
		c.Provider = o.Provider
	}
	if o.Model != "" {
		c.Model = o.Model
	}
	if o.SubagentModel != "" {
		c.SubagentModel = o.SubagentModel
	}
	if o.PermissionMode != "" {
		c.PermissionMode = o.PermissionMode
	}
	if o.Allow != nil {
		c.Allow = o.Allow
	}
	if o.Deny != nil {
		c.Deny = o.Deny
	}
	if o.Server != "" {
		c.Server = o.Server
	}
	if o.Retry.Base != 0 {
		c.Retry.Base = o.Retry.Base
	}
	if o.Retry.MaxDelay != 0 {
		c.Retry.MaxDelay = o.Retry.MaxDelay
	}
	if o.Retry.Attempts != 0 {
		c.Retry.Attempts = o.Retry.Attempts
	}
	for name, p := range o.Providers {
		cur := c.Providers[name]
		if p.Kind != "" {
			cur.Kind = p.Kind
		}
		if p.BaseURL != "" {
			cur.BaseURL = p.BaseURL
		}
		if p.Model != "" {
			cur.Model = p.Model
		}
		if p.APIKeyEnv != "" {
			cur.APIKeyEnv = p.APIKeyEnv
		}
		if p.MaxTokens != 0 {
			cur.MaxTokens = p.MaxTokens
		}
		if p.Path != "" {
			cur.Path = p.Path
		}
		c.Providers[name] = cur
	}
}

func (c *Config) validate() error {
	for name, p := range c.Providers {
		switch p.Kind {
		case "anthropic", "openai", "claude-code", "script":
		default:
			return fmt.Errorf("provider %s: unknown kind %q (want anthropic, openai or claude-code)", name, p.Kind)
		}
	}
	return nil
}

// HasKey reports whether the named provider has an API key.
func (c *Config) HasKey(name string) bool { return c.Providers[name].apiKey != "" }

// DefaultProvider picks the provider to use when none is asked for: the
// configured one, else anthropic with a key, else openai with a key or a
// base URL, else "" (the caller falls back to the scripted demo).
func (c *Config) DefaultProvider() string {
	switch {
	case c.Provider != "":
		return c.Provider
	case c.HasKey("anthropic"):
		return "anthropic"
	case c.HasKey("openai") || c.Providers["openai"].BaseURL != "":
		return "openai"
	}
	return ""
}

// Names lists the configured providers, sorted.
func (c *Config) Names() []string {
	var out []string
	for n := range c.Providers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Build makes the named HTTP provider. Claude Code and script providers are
// built by their own packages.
func (c *Config) Build(name string, logger *slog.Logger) (provider.Provider, error) {
	p, ok := c.Providers[name]
	if !ok {
		switch name {
		case "anthropic", "openai":
			p = Provider{Kind: name}
		default:
			return nil, fmt.Errorf("unknown provider %q (configured: %s)", name, strings.Join(c.Names(), ", "))
		}
	}
	switch p.Kind {
	case "anthropic":
		if p.apiKey == "" {
			return nil, fmt.Errorf("provider %s: no API key: set %s", name, firstNonEmpty(p.APIKeyEnv, "ANTHROPIC_API_KEY"))
		}
		return anthropic.New(anthropic.Options{Name: name, APIKey: p.apiKey, BaseURL: p.BaseURL, Model: p.Model, MaxTokens: p.MaxTokens, Logger: logger}), nil
	case "openai":
		if p.apiKey == "" && p.BaseURL == "" {
			return nil, fmt.Errorf("provider %s: set OPENAI_API_KEY, or a base_url for a local server", name)
		}
		return openai.New(openai.Options{Name: name, APIKey: p.apiKey, BaseURL: p.BaseURL, Model: p.Model, MaxTokens: p.MaxTokens, Logger: logger}), nil
	}
	return nil, fmt.Errorf("provider %s: kind %s is not an HTTP provider", name, p.Kind)
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
