package catalog

import (
	"math"
	"sync"
	"testing"

	"github.com/vigilrun/vigil/chat"
)

func TestLookup(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		name   string
		want   string // the entry expected, "" for none
		window int
	}{
		{"claude-sonnet-4-5", "claude-sonnet-4-5", 200_000},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 200_000},
		{"Claude-Sonnet-4-5-20250929 ", "claude-sonnet-4-5", 200_000},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5", 200_000},
		{"claude-opus-4-1-20250805", "claude-opus-4-1", 200_000},
		{"claude-opus-4-20250514", "claude-opus-4-20250514", 200_000},
		{"claude-3-5-haiku-latest", "claude-3-5-haiku", 200_000},
		{"claude-haiku-4-5-20251001", "claude-haiku-4-5", 200_000},
		{"anthropic/claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 200_000},
		{"openai/gpt-4o", "gpt-4o", 128_000},
		{"openrouter/openai/gpt-4.1-mini", "gpt-4.1-mini", 1_047_576},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", 128_000},
		{"gpt-4o-2024-08-06", "gpt-4o", 128_000},
		{"gpt-4o-2024-05-13", "gpt-4o-2024-05-13", 128_000},
		{"gpt-4.1-2025-04-14", "gpt-4.1", 1_047_576},
		{"o3-2025-04-16", "o3", 200_000},
		{"o3-pro", "o3-pro", 200_000},
		{"o3-mini-2025-01-31", "o3-mini", 200_000},
		{"o4-mini", "o4-mini", 200_000},
		{"gpt-5-2025-08-07", "gpt-5", 400_000},
		{"gpt-5-pro-2025-10-06", "gpt-5-pro", 400_000},
		{"gpt-5-chat-latest", "gpt-5-chat-latest", 128_000},
		// Unknown: no separator before the rest, a bare family prefix, a
		// qualifier alone, or nothing at all.
		{"gpt-5.3", "", 0},
		{"gpt-4omni", "", 0},
		{"o3x", "", 0},
		{"claude-opus-4-7", "", 0},
		{"claude-sonnet-4", "", 0},
		{"anthropic/", "", 0},
		{"qwen2.5-coder:7b", "", 0},
		{"", "", 0},
	} {
		got, ok := c.Lookup(tc.name)
		if ok != (tc.want != "") {
			t.Errorf("Lookup(%q) ok = %v, want %v", tc.name, ok, tc.want != "")
			continue
		}
		if got.Window != tc.window || c.Window(tc.name) != tc.window {
			t.Errorf("Lookup(%q) window = %d, Window = %d, want %d", tc.name, got.Window, c.Window(tc.name), tc.window)
		}
		if tc.want == "" {
			continue
		}
		want := c.models[tc.want]
		if (got.Price == nil) != (want.Price == nil) || got.Price != nil && *got.Price != *want.Price {
			t.Errorf("Lookup(%q) price = %+v, want %s's %+v", tc.name, got.Price, tc.want, want.Price)
		}
	}
}

// Every priced default entry is usable, and the Anthropic cache prices
// follow the 1.25×/0.1× rule.
func TestDefaultTable(t *testing.T) {
	c := Default()
	if len(c.Names()) < 30 {
		t.Fatalf("default table has %d models", len(c.Names()))
	}
	for _, name := range c.Names() {
		m, _ := c.Lookup(name)
		if m.Window <= 0 {
			t.Errorf("%s: window %d", name, m.Window)
		}
		if m.Price != nil && (!m.Price.valid() || m.Price.Input == 0 || m.Price.Output < m.Price.Input) {
			t.Errorf("%s: implausible price %+v", name, *m.Price)
		}
	}
	m, _ := c.Lookup("claude-3-5-haiku")
	if *m.Price != (Price{Input: 0.8, Output: 4, CacheRead: 0.08, CacheWrite: 1}) {
		t.Errorf("claude-3-5-haiku price = %+v", *m.Price)
	}
	m, _ = c.Lookup("claude-opus-4-1")
	if *m.Price != (Price{Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75}) {
		t.Errorf("claude-opus-4-1 price = %+v", *m.Price)
	}
	m, _ = c.Lookup("gpt-4.1")
	if *m.Price != (Price{Input: 2, Output: 8, CacheRead: 0.5, CacheWrite: 2}) {
		t.Errorf("gpt-4.1 price = %+v", *m.Price)
	}
	// Each call makes a new table: changing one does not change another.
	c.models["gpt-4o"].Price.Input = 1000
	if m, _ := Default().Lookup("gpt-4o"); m.Price.Input != 2.5 {
		t.Fatalf("Default shares its table: %+v", m.Price)
	}
}

func TestCost(t *testing.T) {
	c := Default()
	for _, tc := range []struct {
		model  string
		u      chat.Usage
		micros int64
		ok     bool
	}{
		// 1000×3 + 500×15 + 2000×0.30 + 100×3.75 = 11475 µUSD.
		{"claude-sonnet-4-5-20250929", chat.Usage{InputTokens: 1000, OutputTokens: 500, CacheReadTokens: 2000, CacheWriteTokens: 100}, 11_475, true},
		// 1M input and 1M output of gpt-4o: $2.50 + $10.
		{"gpt-4o", chat.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, 12_500_000, true},
		// OpenAI cache writes cost as much as input: 10×2.50 + 10×1.25 + 10×2.50.
		{"openai/gpt-4o", chat.Usage{InputTokens: 10, CacheReadTokens: 10, CacheWriteTokens: 10}, 63, true}, // 62.5 rounds up
		// Half a micro-USD rounds up; less than half rounds down.
		{"gpt-5-nano", chat.Usage{CacheReadTokens: 100}, 1, true}, // 0.5
		{"gpt-5-nano", chat.Usage{CacheReadTokens: 99}, 0, true},  // 0.495
		{"gpt-5-nano", chat.Usage{InputTokens: 29}, 1, true},      // 1.45
		{"claude-opus-4-5", chat.Usage{CacheReadTokens: 3}, 2, true},
		{"claude-opus-4-5", chat.Usage{}, 0, true},
		{"unknown-model", chat.Usage{InputTokens: 1}, 0, false},
		{"gpt-4o-realtime-preview", chat.Usage{InputTokens: 1}, 0, false}, // window, no price
		{"gpt-4o", chat.Usage{InputTokens: -1}, 0, false},
		// Too large for an int64 of micro-USD.
		{"claude-opus-4-1", chat.Usage{OutputTokens: math.MaxInt64}, 0, false},
	} {
		micros, ok := c.CostMicros(tc.model, tc.u)
		if micros != tc.micros || ok != tc.ok {
			t.Errorf("CostMicros(%q, %+v) = %d, %v; want %d, %v", tc.model, tc.u, micros, ok, tc.micros, tc.ok)
		}
		if tc.u.OutputTokens == math.MaxInt64 {
			continue // a float64 holds it: Cost has no overflow
		}
		usd, ok := c.Cost(tc.model, tc.u)
		if ok != tc.ok {
			t.Errorf("Cost(%q) ok = %v, want %v", tc.model, ok, tc.ok)
		}
		if tc.ok && math.Abs(usd*1e6-float64(tc.micros)) > 0.5+1e-9 {
			t.Errorf("Cost(%q, %+v) = %v USD, CostMicros = %d", tc.model, tc.u, usd, tc.micros)
		}
		if !ok && usd != 0 {
			t.Errorf("Cost(%q) = %v with ok=false", tc.model, usd)
		}
	}
	if usd, ok := c.Cost("claude-sonnet-4-5", chat.Usage{InputTokens: 1000, OutputTokens: 500, CacheReadTokens: 2000, CacheWriteTokens: 100}); !ok || math.Abs(usd-0.011475) > 1e-12 {
		t.Errorf("Cost = %v, %v; want 0.011475", usd, ok)
	}
}

// A price that is negative, not a number or absurd is treated as unknown,
// never used.
func TestInvalidPriceIsUnknown(t *testing.T) {
	for _, p := range []Price{{Input: -1, Output: 1}, {Input: math.NaN()}, {Output: math.Inf(1)}, {CacheRead: 2e9}} {
		c := New(map[string]Model{"m": {Price: &p}})
		if _, ok := c.CostMicros("m", chat.Usage{InputTokens: 1}); ok {
			t.Errorf("price %+v used", p)
		}
		if _, ok := c.Cost("m", chat.Usage{InputTokens: 1}); ok {
			t.Errorf("price %+v used by Cost", p)
		}
	}
}

func TestWith(t *testing.T) {
	base := Default()
	c := base.With(map[string]Model{
		// Window only: keeps the default price.
		"claude-sonnet-4-5": {Window: 1_000_000},
		// Price only: keeps the default window.
		"GPT-4o": {Price: &Price{Input: 1, Output: 2, CacheRead: 0.5, CacheWrite: 1}},
		// A dated name inherits its family's window and price.
		"claude-haiku-4-5-20251001": {Price: &Price{Input: 9, Output: 9, CacheRead: 9, CacheWrite: 9}},
		// A new model.
		"qwen2.5-coder": {Window: 32_768, Price: &Price{}},
		// A negative window keeps the default.
		"o3": {Window: -5},
		// Nothing known: adds nothing.
		"mystery": {},
		"":        {Window: 5},
	})
	for _, tc := range []struct {
		name   string
		window int
		input  float64 // -1: no price
	}{
		{"claude-sonnet-4-5-20250929", 1_000_000, 3},
		{"gpt-4o-2024-08-06", 128_000, 1},
		{"gpt-4o-mini", 128_000, 0.15}, // the longer default entry still wins
		{"claude-haiku-4-5-20251001", 200_000, 9},
		{"claude-haiku-4-5", 200_000, 1},
		{"qwen2.5-coder:7b", 32_768, 0},
		{"o3", 200_000, 2},
	} {
		m, ok := c.Lookup(tc.name)
		if !ok || m.Window != tc.window || m.Price == nil || m.Price.Input != tc.input {
			t.Errorf("With: Lookup(%q) = %+v %v (price %+v), want window %d input %v", tc.name, m, ok, m.Price, tc.window, tc.input)
		}
	}
	if _, ok := c.Lookup("mystery"); ok {
		t.Error("an empty override was added")
	}
	if micros, ok := c.CostMicros("qwen2.5-coder", chat.Usage{InputTokens: 1e6, OutputTokens: 1e6}); !ok || micros != 0 {
		t.Errorf("free local model cost %d, %v", micros, ok)
	}
	// The base is unchanged, and so are the caller's overrides.
	if m, _ := base.Lookup("gpt-4o"); m.Price.Input != 2.5 || base.Window("claude-sonnet-4-5") != 200_000 {
		t.Fatalf("With changed its receiver: %+v", m)
	}
	p := &Price{Input: 1}
	c2 := base.With(map[string]Model{"x": {Price: p}})
	p.Input = 99
	if m, _ := c2.Lookup("x"); m.Price.Input != 1 {
		t.Fatal("With kept the caller's price pointer")
	}
	// Lookup returns copies.
	m, _ := c2.Lookup("x")
	m.Price.Input = 42
	if m, _ := c2.Lookup("x"); m.Price.Input != 1 {
		t.Fatal("Lookup returned the catalog's own price")
	}
}

func TestNilAndZeroCatalog(t *testing.T) {
	var nilc *Catalog
	if _, ok := nilc.Lookup("gpt-4o"); ok || nilc.Window("gpt-4o") != 0 || nilc.Names() != nil {
		t.Fatal("nil catalog knows a model")
	}
	if _, ok := (&Catalog{}).CostMicros("gpt-4o", chat.Usage{}); ok {
		t.Fatal("zero catalog priced a model")
	}
	c := nilc.With(map[string]Model{"m": {Window: 7}})
	if c.Window("m") != 7 {
		t.Fatal("With on a nil catalog")
	}
}

func TestConcurrentUse(t *testing.T) {
	c := Default()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				c.CostMicros("claude-sonnet-4-5-20250929", chat.Usage{InputTokens: 10})
				_ = c.With(map[string]Model{"gpt-4o": {Window: 1}})
			}
		})
	}
	wg.Wait()
}
