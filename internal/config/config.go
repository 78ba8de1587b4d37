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
//	models:                        # on top of vigil's built-in model catalog
//	  claude-sonnet-4-5: {context_window: 1000000}
//	  qwen2.5-coder:
//	    context_window: 32768
//	    price: {input: 0, output: 0}   # USD per million tokens
//	budgets:                       # every session's; 0 = built-in, negative = no limit
//	  tokens: 2000000
//	  rounds: 200
//	  wall: 2h
//	  cost_usd: 5
//	compact: {threshold: 0.8}      # compact an agent's context at 80% of the window
//	stall_timeout: 120s            # abort and retry a model stream silent this long
//
// Durations are Go durations ("90s", "2h"; "no limit" for wall is, say,
// "-1s"). A models entry is found the way the catalog finds its own (the
// exact name, else the longest prefix, so "claude-sonnet-4-5" also covers
// its dated snapshots). A price must give input and output; cache_read
// and cache_write default to the input price.
//
// A project's .vigil/config.yaml may set only provider, model,
// subagent_model, deny rules, models and budgets: a repository someone
// cloned must not pick the program vigil runs, the server an API key goes
// to, or looser permissions or limits. So its deny rules are added to the
// user's, its budgets only lower the user's (a project's "no limit" is
// ignored), and its models entries only tighten what vigil already knows:
// a context window larger than the known one, or a price below the known
// one, is ignored, so that a project cannot make a cost budget
// meaningless by pricing a model at zero. For a model vigil knows nothing
// about, a project may set both. API keys come from the environment
// (ANTHROPIC_API_KEY, OPENAI_API_KEY, or the variable a provider names in
// api_key_env), never from a file, and never appear in logs or errors.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vigilrun/vigil/core"
	"github.com/vigilrun/vigil/internal/catalog"
	"github.com/vigilrun/vigil/internal/cmdenv"
	"github.com/vigilrun/vigil/internal/sandbox"
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
	// Models overrides or adds to vigil's model catalog, by model name
	// (lower case; see Catalog).
	Models map[string]ModelConfig `yaml:"models"`
	// Budgets are the default budgets of every session.
	Budgets Budgets `yaml:"budgets"`
	// Compact shapes when an agent's context is compacted.
	Compact Compact `yaml:"compact"`
	// StallTimeout is how long a model stream may send no bytes before it
	// is aborted and retried: 0 means DefaultStallTimeout, a negative
	// value turns the check off.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// BackgroundTimeout bounds a background command that sets no timeout
	// of its own (0: 4 hours).
	BackgroundTimeout time.Duration `yaml:"background_timeout"`
	// CommandEnv names more variables of vigil's environment that agents'
	// commands get, beyond PATH, HOME, the locale, TERM, USER, SHELL,
	// TMPDIR and TZ (see internal/cmdenv). vigil's own (VIGIL_*) are
	// refused. Only the user's file may set it: a project cannot ask for
	// the user's secrets.
	CommandEnv []string `yaml:"command_env"`
	// Sandbox confines agents' commands with the kernel. Only the user's
	// file may set it: a project cannot loosen it.
	Sandbox Sandbox `yaml:"sandbox"`
	// Sources lists the files read, in order.
	Sources []string `yaml:"-"`
	// Rules are the project rules a person saved (RulesFile), kept in
	// RulesPath.
	Rules     ProjectRules `yaml:"-"`
	RulesPath string       `yaml:"-"`
}

// Sandbox is the kernel sandbox of agents' commands.
type Sandbox struct {
	// Mode is read-only, workspace-write or full-access; empty chooses
	// workspace-write where the machine has a sandbox.
	Mode string `yaml:"mode"`
	// Network lets confined commands use the network (off by default).
	Network bool `yaml:"network"`
	// WritableGit leaves each root's .git writable in workspace-write.
	WritableGit bool `yaml:"writable_git"`
}

// Provider configures one provider.
type Provider struct {
	// Kind is anthropic, openai, claude-code or codex; it defaults to the
	// provider's name when that is one of them.
	Kind    string `yaml:"kind"`
	BaseURL string `yaml:"base_url"`
	Model   string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the key.
	APIKeyEnv string `yaml:"api_key_env"`
	// MaxTokens caps answers (anthropic: default 8192).
	MaxTokens int `yaml:"max_tokens"`
	// Path is the claude executable for kind claude-code, the codex
	// executable for kind codex.
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

// ModelConfig overrides what vigil's catalog knows about one model. A zero
// Window keeps the catalog's window and a nil Price its price.
type ModelConfig struct {
	// Window is the context window in tokens.
	Window int `yaml:"context_window"`
	// Price is the price in USD per million tokens.
	Price *PriceConfig `yaml:"price"`
}

// PriceConfig is a model's price in USD per million tokens. Input and
// Output must be set; CacheRead and CacheWrite default to Input.
type PriceConfig struct {
	Input      *float64 `yaml:"input"`
	Output     *float64 `yaml:"output"`
	CacheRead  *float64 `yaml:"cache_read"`
	CacheWrite *float64 `yaml:"cache_write"`
}

// price converts p to the catalog's form, filling in the cache prices; it
// is nil when p lacks an input or output price.
func (p *PriceConfig) price() *catalog.Price {
	if p == nil || p.Input == nil || p.Output == nil {
		return nil
	}
	out := &catalog.Price{Input: *p.Input, Output: *p.Output, CacheRead: *p.Input, CacheWrite: *p.Input}
	if p.CacheRead != nil {
		out.CacheRead = *p.CacheRead
	}
	if p.CacheWrite != nil {
		out.CacheWrite = *p.CacheWrite
	}
	return out
}

// priceConfig is the config form of p, every field set.
func priceConfig(p catalog.Price) *PriceConfig {
	return &PriceConfig{Input: &p.Input, Output: &p.Output, CacheRead: &p.CacheRead, CacheWrite: &p.CacheWrite}
}

// Budgets are limits on a session. For each, zero means vigil's built-in
// default and a negative value means no limit.
type Budgets struct {
	// Tokens caps the tokens the session's model calls use.
	Tokens int64 `yaml:"tokens"`
	// Rounds caps the model calls.
	Rounds int `yaml:"rounds"`
	// Wall caps the session's wall-clock time.
	Wall time.Duration `yaml:"wall"`
	// CostUSD caps the session's cost at list price, in USD.
	CostUSD float64 `yaml:"cost_usd"`
}

// Compact shapes context compaction.
type Compact struct {
	// Threshold is the fraction of the model's context window at which an
	// agent's context is compacted, in (0, 1); 0 means
	// DefaultCompactThreshold.
	Threshold float64 `yaml:"threshold"`
}

// DefaultCompactThreshold is the compaction threshold when the config
// sets none.
const DefaultCompactThreshold = 0.8

// DefaultStallTimeout is the stall timeout when the config sets none.
const DefaultStallTimeout = 120 * time.Second

// Catalog returns vigil's model catalog with the config's models entries
// applied: catalog.Default().With(the overrides). An entry whose price
// lacks input or output keeps the catalog's price.
func (c *Config) Catalog() *catalog.Catalog {
	if c == nil || len(c.Models) == 0 {
		return catalog.Default()
	}
	over := make(map[string]catalog.Model, len(c.Models))
	for name, m := range c.Models {
		over[name] = catalog.Model{Window: m.Window, Price: m.Price.price()}
	}
	return catalog.Default().With(over)
}

// Core returns the core's settings that the config sets.
func (c *Config) Core() core.Config {
	if c == nil {
		return core.Config{}
	}
	cat := c.Catalog()
	return core.Config{
		RetryBase: c.Retry.Base, RetryMaxDelay: c.Retry.MaxDelay, RetryAttempts: c.Retry.Attempts,
		Budget: core.Budget{
			Tokens: c.Budgets.Tokens, Rounds: c.Budgets.Rounds, Wall: c.Budgets.Wall,
			Cost: usdMicros(c.Budgets.CostUSD),
		},
		Price: cat.CostMicros, ContextWindow: func(_, model string) int { return cat.Window(model) }, CompactAt: c.Compact.Threshold,
		BackgroundTimeout: c.BackgroundTimeout,
	}
}

// usdMicros converts dollars to micro-USD, keeping the sign (negative means
// no bound).
func usdMicros(usd float64) int64 {
	return int64(math.Round(usd * 1e6))
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
// is sent, or looser permissions or limits. Deny rules only tighten; they
// are added to the user's. Budgets only lower the user's, and models
// entries only tighten the catalog (see mergeProject).
type projectConfig struct {
	Provider      string                 `yaml:"provider"`
	Model         string                 `yaml:"model"`
	SubagentModel string                 `yaml:"subagent_model"`
	Deny          []string               `yaml:"deny"`
	Models        map[string]ModelConfig `yaml:"models"`
	Budgets       Budgets                `yaml:"budgets"`
}

// Load reads the files that exist, later ones overriding earlier ones
// field by field, then applies the environment: VIGIL_PROVIDER,
// VIGIL_MODEL, VIGIL_SUBAGENT_MODEL, ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
// and the API keys. A project file may set only provider (one the user's
// configuration defines or a built-in one), model, subagent_model, deny
// rules, models entries that tighten the catalog, and budgets that lower
// the user's. Each file's models, budgets and compact settings are checked
// as it is read, and an error names the file and the key.
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
				return nil, fmt.Errorf("project config %s: %w (a project file may set only provider, model, subagent_model, deny, models and budgets; the rest belongs in your own ~/.config/vigil/config.yaml)", f.Path, err)
			}
			if err := checkLayer(p.Models, p.Budgets, Compact{}); err != nil {
				return nil, fmt.Errorf("project config %s: %w", f.Path, err)
			}
			c.merge(&Config{Provider: p.Provider, Model: p.Model, SubagentModel: p.SubagentModel})
			c.Deny = append(c.Deny, p.Deny...)
			c.mergeProject(p.Models, p.Budgets)
		} else {
			var layer Config
			if err := dec.Decode(&layer); err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("config %s: %w", f.Path, err)
			}
			if err := checkLayer(layer.Models, layer.Budgets, layer.Compact); err != nil {
				return nil, fmt.Errorf("config %s: %w", f.Path, err)
			}
			if err := cmdenv.Check(layer.CommandEnv); err != nil {
				return nil, fmt.Errorf("config %s: %w", f.Path, err)
			}
			if m := layer.Sandbox.Mode; m != "" {
				if _, err := sandbox.ParseMode(m); err != nil {
					return nil, fmt.Errorf("config %s: %w", f.Path, err)
				}
			}
			c.merge(&layer)
		}
		c.Sources = append(c.Sources, f.Path)
	}
	c.RulesPath = RulesFile(env)
	rules, err := LoadProjectRules(c.RulesPath)
	if err != nil {
		return nil, err
	}
	c.Rules = rules
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
			case "codex":
				keyEnv = "OPENAI_API_KEY"
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
	for name, m := range o.Models {
		k := modelKey(name)
		cur := c.Models[k]
		if m.Window != 0 {
			cur.Window = m.Window
		}
		if m.Price != nil {
			cur.Price = m.Price
		}
		if c.Models == nil {
			c.Models = map[string]ModelConfig{}
		}
		c.Models[k] = cur
	}
	if o.Budgets.Tokens != 0 {
		c.Budgets.Tokens = o.Budgets.Tokens
	}
	if o.Budgets.Rounds != 0 {
		c.Budgets.Rounds = o.Budgets.Rounds
	}
	if o.Budgets.Wall != 0 {
		c.Budgets.Wall = o.Budgets.Wall
	}
	if o.Budgets.CostUSD != 0 {
		c.Budgets.CostUSD = o.Budgets.CostUSD
	}
	if o.Compact.Threshold != 0 {
		c.Compact.Threshold = o.Compact.Threshold
	}
	if o.StallTimeout != 0 {
		c.StallTimeout = o.StallTimeout
	}
	if o.BackgroundTimeout > 0 {
		c.BackgroundTimeout = o.BackgroundTimeout
	}
	c.CommandEnv = append(c.CommandEnv, o.CommandEnv...)
	if o.Sandbox.Mode != "" {
		c.Sandbox.Mode = o.Sandbox.Mode
	}
	c.Sandbox.Network = c.Sandbox.Network || o.Sandbox.Network
	c.Sandbox.WritableGit = c.Sandbox.WritableGit || o.Sandbox.WritableGit
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

// modelKey is the form models keys are merged in; the catalog compares
// names the same way.
func modelKey(name string) string { return strings.ToLower(strings.TrimSpace(name)) }

// mergeProject applies a project file's models and budgets, which may
// only tighten: a budget only lowers the one set so far (a project's
// negative "no limit" is ignored), a context window only shrinks the
// known one, and each price only rises above the known one. Where vigil
// knows no window or price for a model, the project's is taken.
func (c *Config) mergeProject(models map[string]ModelConfig, b Budgets) {
	c.Budgets.Tokens = lower(c.Budgets.Tokens, b.Tokens)
	c.Budgets.Rounds = lower(c.Budgets.Rounds, b.Rounds)
	c.Budgets.Wall = lower(c.Budgets.Wall, b.Wall)
	c.Budgets.CostUSD = lower(c.Budgets.CostUSD, b.CostUSD)
	if len(models) == 0 {
		return
	}
	known := c.Catalog() // the built-in table with the user's entries
	for name, m := range models {
		k := modelKey(name)
		have, _ := known.Lookup(k)
		cur := c.Models[k]
		if m.Window > 0 && (have.Window <= 0 || m.Window < have.Window) {
			cur.Window = m.Window
		}
		if p := m.Price.price(); p != nil {
			if q := have.Price; q != nil {
				p.Input = max(p.Input, q.Input)
				p.Output = max(p.Output, q.Output)
				p.CacheRead = max(p.CacheRead, q.CacheRead)
				p.CacheWrite = max(p.CacheWrite, q.CacheWrite)
			}
			cur.Price = priceConfig(*p)
		}
		if cur.Window == 0 && cur.Price == nil {
			continue // nothing tighter than what is known
		}
		if c.Models == nil {
			c.Models = map[string]ModelConfig{}
		}
		c.Models[k] = cur
	}
}

// lower is the budget cur as a project's value p lowers it: p counts only
// when it is a limit (positive) below cur or cur is unset or unlimited.
func lower[T ~int | ~int64 | ~float64](cur, p T) T {
	if p <= 0 {
		return cur
	}
	if cur <= 0 || p < cur {
		return p
	}
	return cur
}

// maxPrice is the largest price a config may set, in USD per million
// tokens: larger figures are typos (or prices per token).
const maxPrice = 1e6

// checkLayer checks one file's models, budgets and compaction settings;
// its errors name the key at fault.
func checkLayer(models map[string]ModelConfig, b Budgets, cp Compact) error {
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	sort.Strings(names) // the same error every time
	seen := map[string]string{}
	for _, name := range names {
		m := models[name]
		k := modelKey(name)
		if k == "" {
			return errors.New("models: an entry has an empty model name")
		}
		if other, dup := seen[k]; dup {
			return fmt.Errorf("models: %q and %q name the same model", other, name)
		}
		seen[k] = name
		if m.Window < 0 {
			return fmt.Errorf("models.%s.context_window: %d is negative", name, m.Window)
		}
		if m.Price == nil {
			continue
		}
		for _, f := range []struct {
			key      string
			v        *float64
			required bool
		}{
			{"input", m.Price.Input, true},
			{"output", m.Price.Output, true},
			{"cache_read", m.Price.CacheRead, false},
			{"cache_write", m.Price.CacheWrite, false},
		} {
			switch {
			case f.v == nil && f.required:
				return fmt.Errorf("models.%s.price.%s: missing (a price needs input and output, in USD per million tokens)", name, f.key)
			case f.v == nil:
			case math.IsNaN(*f.v) || math.IsInf(*f.v, 0):
				return fmt.Errorf("models.%s.price.%s: %v is not a price", name, f.key, *f.v)
			case *f.v < 0:
				return fmt.Errorf("models.%s.price.%s: %v is negative", name, f.key, *f.v)
			case *f.v > maxPrice:
				return fmt.Errorf("models.%s.price.%s: %v USD per million tokens is implausible (at most %.0f)", name, f.key, *f.v, float64(maxPrice))
			}
		}
	}
	if math.IsNaN(b.CostUSD) || math.IsInf(b.CostUSD, 0) {
		return fmt.Errorf("budgets.cost_usd: %v is not an amount (a negative value means no limit)", b.CostUSD)
	}
	if t := cp.Threshold; t != 0 && !(t > 0 && t < 1) {
		return fmt.Errorf("compact.threshold: %v is not a fraction between 0 and 1 (exclusive)", t)
	}
	return nil
}

func (c *Config) validate() error {
	for name, p := range c.Providers {
		switch p.Kind {
		case "anthropic", "openai", "claude-code", "codex", "script":
		default:
			return fmt.Errorf("provider %s: unknown kind %q (want anthropic, openai, claude-code or codex)", name, p.Kind)
		}
	}
	return nil
}

// HasKey reports whether the named provider has an API key.
func (c *Config) HasKey(name string) bool { return c.Providers[name].apiKey != "" }

// APIKey returns the named provider's API key, read from its environment
// variable; "" when it has none. Only a provider process that needs the
// key in its own environment (kind codex) asks for it: log nothing of it.
func (c *Config) APIKey(name string) string { return c.Providers[name].apiKey }

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
		return anthropic.New(anthropic.Options{Name: name, APIKey: p.apiKey, BaseURL: p.BaseURL, Model: p.Model, MaxTokens: p.MaxTokens, Logger: logger,
			Retry: provider.RetryPolicy{StallTimeout: c.StallTimeout}}), nil
	case "openai":
		if p.apiKey == "" && p.BaseURL == "" {
			return nil, fmt.Errorf("provider %s: set OPENAI_API_KEY, or a base_url for a local server", name)
		}
		return openai.New(openai.Options{Name: name, APIKey: p.apiKey, BaseURL: p.BaseURL, Model: p.Model, MaxTokens: p.MaxTokens, Logger: logger,
			Retry: provider.RetryPolicy{StallTimeout: c.StallTimeout}}), nil
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

// AllowFor returns the allow rules of a session in dir: the configured
// ones and those a person saved for the project.
func (c *Config) AllowFor(dir string) []string {
	if c == nil {
		return nil
	}
	out := slices.Clone(c.Allow)
	if abs, err := filepath.Abs(dir); err == nil && dir != "" {
		out = append(out, c.Rules.For(abs)...)
	}
	return out
}

// SaveRule keeps rule for the project at dir (see SaveProjectRule) and
// applies it to later sessions there.
func (c *Config) SaveRule(dir, rule string) error {
	if err := SaveProjectRule(c.RulesPath, dir, rule); err != nil {
		return err
	}
	if c.Rules == nil {
		c.Rules = ProjectRules{}
	}
	dir = filepath.Clean(dir)
	c.Rules[dir] = append(c.Rules[dir], rule)
	return nil
}
