package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigilrun/vigil/chat"
)

// userAndProject writes a user file and a project file and loads them.
func userAndProject(t *testing.T, user, project string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	u := File{Path: filepath.Join(dir, "user.yaml")}
	p := File{Path: filepath.Join(dir, ".vigil/config.yaml"), Project: true}
	write(t, u.Path, user)
	write(t, p.Path, project)
	return Load(envOf(nil), u, p)
}

func TestModelsBudgetsCompactParse(t *testing.T) {
	dir := t.TempDir()
	f := File{Path: filepath.Join(dir, "c.yaml")}
	write(t, f.Path, `
models:
  Claude-Sonnet-4-5: {context_window: 1000000}
  gpt-4o:
    price: {input: 1, output: 4, cache_read: 0.5, cache_write: 1.5}
  qwen2.5-coder:
    context_window: 32768
    price: {input: 0.2, output: 0.6}
budgets:
  tokens: 2000000
  rounds: 200
  wall: 2h
  cost_usd: 5.5
compact: {threshold: 0.7}
stall_timeout: 90s
`)
	c, err := Load(envOf(nil), f)
	if err != nil {
		t.Fatal(err)
	}
	want := Budgets{Tokens: 2_000_000, Rounds: 200, Wall: 2 * time.Hour, CostUSD: 5.5}
	if c.Budgets != want || c.Compact.Threshold != 0.7 || c.StallTimeout != 90*time.Second {
		t.Fatalf("budgets %+v, compact %+v, stall %v", c.Budgets, c.Compact, c.StallTimeout)
	}
	if _, ok := c.Models["claude-sonnet-4-5"]; !ok {
		t.Fatalf("models keys not lower-cased: %v", c.Models)
	}
	cat := c.Catalog()
	if w := cat.Window("claude-sonnet-4-5-20250929"); w != 1_000_000 {
		t.Errorf("overridden window = %d", w)
	}
	// The window override keeps the built-in price: 1M input tokens at $3.
	if m, ok := cat.CostMicros("claude-sonnet-4-5", chat.Usage{InputTokens: 1_000_000}); !ok || m != 3_000_000 {
		t.Errorf("sonnet cost = %d, %v", m, ok)
	}
	// 1000×1 + 1000×4 + 1000×0.5 + 1000×1.5 = 7000 µUSD, at the 128k default window.
	u := chat.Usage{InputTokens: 1000, OutputTokens: 1000, CacheReadTokens: 1000, CacheWriteTokens: 1000}
	if m, ok := cat.CostMicros("gpt-4o-2024-08-06", u); !ok || m != 7000 || cat.Window("gpt-4o") != 128_000 {
		t.Errorf("gpt-4o cost = %d, %v; window %d", m, ok, cat.Window("gpt-4o"))
	}
	// Unset cache prices default to the input price: 1000×(0.2+0.6+0.2+0.2).
	if m, ok := cat.CostMicros("qwen2.5-coder:7b", u); !ok || m != 1200 || cat.Window("qwen2.5-coder") != 32768 {
		t.Errorf("qwen cost = %d, %v; window %d", m, ok, cat.Window("qwen2.5-coder"))
	}
	// Without overrides, and on a nil config, it is the default catalog.
	var nilc *Config
	for _, c := range []*Config{nilc, {}} {
		if c.Catalog().Window("gpt-4.1") != 1_047_576 {
			t.Error("no default catalog")
		}
	}
}

func TestLaterUserFileOverrides(t *testing.T) {
	dir := t.TempDir()
	a, b := File{Path: filepath.Join(dir, "a.yaml")}, File{Path: filepath.Join(dir, "b.yaml")}
	write(t, a.Path, "models: {m: {context_window: 10, price: {input: 1, output: 1}}}\nbudgets: {tokens: 100, rounds: 5}\ncompact: {threshold: 0.5}\nstall_timeout: 5s\n")
	write(t, b.Path, "models: {M: {context_window: 20}}\nbudgets: {tokens: -1}\nstall_timeout: -1s\n")
	c, err := Load(envOf(nil), a, b)
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Models["m"]; m.Window != 20 || m.Price == nil || *m.Price.Input != 1 {
		t.Errorf("models merged to %+v", m)
	}
	if c.Budgets.Tokens != -1 || c.Budgets.Rounds != 5 || c.Compact.Threshold != 0.5 || c.StallTimeout != -time.Second {
		t.Errorf("merged budgets %+v, compact %+v, stall %v", c.Budgets, c.Compact, c.StallTimeout)
	}
}

// A project may lower budgets but never raise them, nor lift them.
func TestProjectBudgetsOnlyLower(t *testing.T) {
	c, err := userAndProject(t,
		"budgets: {tokens: 1000, rounds: 10, wall: 1h, cost_usd: 2}",
		"budgets: {tokens: 5000, rounds: 3, wall: -1s, cost_usd: -1}")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Budgets{Tokens: 1000, Rounds: 3, Wall: time.Hour, CostUSD: 2}); c.Budgets != want {
		t.Fatalf("budgets = %+v, want %+v", c.Budgets, want)
	}
	// Where the user set no limit or none at all, the project's limit counts.
	c, err = userAndProject(t, "budgets: {tokens: -1, cost_usd: -1}", "budgets: {tokens: 500, rounds: 4, cost_usd: 0.5, wall: 10m}")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Budgets{Tokens: 500, Rounds: 4, Wall: 10 * time.Minute, CostUSD: 0.5}); c.Budgets != want {
		t.Fatalf("budgets = %+v, want %+v", c.Budgets, want)
	}
	// Nor can a project reach what it may not set at all.
	for _, body := range []string{"compact: {threshold: 0.9}", "stall_timeout: -1s", "budgets: {cost: 1}"} {
		if _, err := userAndProject(t, "", body); err == nil || !strings.Contains(err.Error(), "a project file may set only") {
			t.Errorf("project file %q: %v", body, err)
		}
	}
}

// A project's models entries only tighten what vigil knows: a smaller
// window, a higher price. It cannot price a model at zero to defeat a cost
// budget.
func TestProjectModelsOnlyTighten(t *testing.T) {
	c, err := userAndProject(t, `
models:
  gpt-4o: {price: {input: 2, output: 8}}
`, `
models:
  claude-sonnet-4-5: {context_window: 100000, price: {input: 0, output: 0}}
  claude-haiku-4-5: {context_window: 5000000}
  gpt-4o: {price: {input: 3, output: 1, cache_read: 0, cache_write: 9}}
  local-model: {context_window: 8192, price: {input: 0, output: 0}}
`)
	if err != nil {
		t.Fatal(err)
	}
	cat := c.Catalog()
	for _, tc := range []struct {
		model  string
		window int
		price  [4]float64 // input, output, cache read, cache write
	}{
		{"claude-sonnet-4-5", 100_000, [4]float64{3, 15, 0.3, 3.75}},        // smaller window taken, zero price ignored
		{"claude-haiku-4-5-20251001", 200_000, [4]float64{1, 5, 0.1, 1.25}}, // larger window ignored
		{"gpt-4o", 128_000, [4]float64{3, 8, 2, 9}},                         // each price only rises above the user's
		{"local-model", 8192, [4]float64{0, 0, 0, 0}},                       // unknown to vigil: the project's
	} {
		m, ok := cat.Lookup(tc.model)
		if !ok || m.Price == nil {
			t.Errorf("%s: not found or no price: %+v", tc.model, m)
			continue
		}
		got := [4]float64{m.Price.Input, m.Price.Output, m.Price.CacheRead, m.Price.CacheWrite}
		if m.Window != tc.window || got != tc.price {
			t.Errorf("%s: window %d price %v; want %d %v", tc.model, m.Window, got, tc.window, tc.price)
		}
	}
	if _, ok := c.Models["claude-haiku-4-5"]; ok {
		t.Error("an ignored project entry was kept")
	}
}

func TestModelsBudgetsCompactValidation(t *testing.T) {
	dir := t.TempDir()
	user := File{Path: filepath.Join(dir, "user.yaml")}
	proj := File{Path: filepath.Join(dir, ".vigil/config.yaml"), Project: true}
	for _, tc := range []struct {
		f    File
		body string
		want string
	}{
		{user, "models: {m: {context_window: -1}}", "models.m.context_window"},
		{proj, "models: {m: {context_window: -1}}", "models.m.context_window"},
		{user, "models: {m: {price: {input: -1, output: 1}}}", "models.m.price.input"},
		{proj, "models: {m: {price: {input: 1, output: 1, cache_write: -0.5}}}", "models.m.price.cache_write"},
		{user, "models: {m: {price: {input: .nan, output: 1}}}", "models.m.price.input"},
		{user, "models: {m: {price: {input: 1, output: .inf}}}", "models.m.price.output"},
		{user, "models: {m: {price: {input: 1, output: 2e7}}}", "models.m.price.output"},
		{user, "models: {m: {price: {output: 1}}}", "models.m.price.input: missing"},
		{user, "models: {m: {price: {}}}", "models.m.price.input: missing"},
		{user, "models: {m: {price: {input: 1}}}", "models.m.price.output: missing"},
		{user, "models: {m: {price: {input: 1, output: 1, cache: 1}}}", "cache"},
		{user, "models: {M: {context_window: 1}, m: {context_window: 2}}", "name the same model"},
		{user, "models: {' ': {context_window: 1}}", "empty model name"},
		{user, "compact: {threshold: 1}", "compact.threshold"},
		{user, "compact: {threshold: 1.5}", "compact.threshold"},
		{user, "compact: {threshold: -0.2}", "compact.threshold"},
		{user, "budgets: {cost_usd: .nan}", "budgets.cost_usd"},
		{user, "budgets: {wall: forever}", "line 1: cannot unmarshal !!str `forever` into time.Duration"},
		{user, "stall_timeout: soon", "into time.Duration"},
	} {
		write(t, tc.f.Path, tc.body)
		_, err := Load(envOf(nil), tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.f.Path) {
			t.Errorf("%s %q: error %v, want one naming %s and %q", tc.f.Path, tc.body, err, tc.f.Path, tc.want)
		}
	}
	// Zero values are fine: they mean the defaults.
	write(t, user.Path, "models: {m: {context_window: 0, price: {input: 0, output: 0}}}\ncompact: {threshold: 0}\nbudgets: {tokens: 0, cost_usd: -1}\nstall_timeout: 0s")
	if _, err := Load(envOf(nil), user); err != nil {
		t.Fatalf("zero values: %v", err)
	}
}
