// Package catalog is what vigil knows about models: each one's context
// window and list price. Default returns a dated table of common Anthropic
// and OpenAI models; With layers a user's overrides on top of it.
//
// A model is found by its exact name, else by the longest known prefix
// that ends at a separator ('-', '@' or ':'), so "claude-sonnet-4-5-20250929"
// finds "claude-sonnet-4-5" but "gpt-5.1" does not find "gpt-5". A
// provider-qualified name such as "anthropic/claude-haiku-4-5" is tried as
// written first, then without its qualifier. Names are compared without
// regard to case.
//
// Costs are never guessed: a model that is not in the catalog, or whose
// price is unknown, has no cost (ok is false). Sums of costs are best kept
// in micro-USD from CostMicros, which is exact integer arithmetic; Cost is
// a float64 for display.
package catalog

import (
	"maps"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/vigilrun/vigil/chat"
)

// Price is a model's price in USD per million tokens.
type Price struct {
	// Input is the price of uncached input tokens.
	Input float64
	// Output is the price of output tokens.
	Output float64
	// CacheRead is the price of input tokens read from the prompt cache.
	CacheRead float64
	// CacheWrite is the price of input tokens written to the prompt cache.
	CacheWrite float64
}

// maxPrice bounds a usable price (USD per million tokens); a larger,
// negative or non-finite price is treated as unknown.
const maxPrice = 1e9

// valid reports whether every component is a usable price.
func (p *Price) valid() bool {
	for _, v := range []float64{p.Input, p.Output, p.CacheRead, p.CacheWrite} {
		if !(v >= 0 && v <= maxPrice) { // false for NaN too
			return false
		}
	}
	return true
}

// Model is what vigil knows about one model.
type Model struct {
	// Window is the context window in tokens; 0 when unknown.
	Window int
	// Price is the list price; nil when unknown.
	Price *Price
}

// clone returns m with its own copy of the price.
func (m Model) clone() Model {
	if m.Price != nil {
		p := *m.Price
		m.Price = &p
	}
	return m
}

// Catalog maps model names to what vigil knows about them. A Catalog is
// not changed after it is made and is safe for concurrent use; the zero
// value and a nil *Catalog know no models.
type Catalog struct {
	models map[string]Model // keyed by normalized name
}

// New returns a catalog of exactly the given models (names are compared
// without regard to case). Most callers want Default, or Default().With.
func New(models map[string]Model) *Catalog {
	c := &Catalog{models: make(map[string]Model, len(models))}
	for name, m := range models {
		if k := normalize(name); k != "" {
			c.models[k] = m.clone()
		}
	}
	return c
}

// normalize is the form names are compared in.
func normalize(name string) string { return strings.ToLower(strings.TrimSpace(name)) }

// isSep reports whether b may end a prefix match: the rest of the name is
// then a date, a snapshot or a variant of the prefix.
func isSep(b byte) bool { return b == '-' || b == '@' || b == ':' }

// Lookup finds a model by name: the exact name, else the longest known
// prefix ending at a separator, first as written and then, for a
// provider-qualified name ("openai/gpt-4o"), without the qualifier. The
// returned Model is a copy.
func (c *Catalog) Lookup(model string) (Model, bool) {
	if c == nil || len(c.models) == 0 {
		return Model{}, false
	}
	name := normalize(model)
	if name == "" {
		return Model{}, false
	}
	if m, ok := c.find(name); ok {
		return m, true
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 && i+1 < len(name) {
		if m, ok := c.find(name[i+1:]); ok {
			return m, true
		}
	}
	return Model{}, false
}

// find looks name up exactly, then by its prefixes longest first. A
// qualified name's prefixes stop short of its qualifier.
func (c *Catalog) find(name string) (Model, bool) {
	if m, ok := c.models[name]; ok {
		return m.clone(), true
	}
	floor := strings.LastIndexByte(name, '/') + 1
	for i := len(name) - 1; i > floor; i-- {
		if !isSep(name[i]) {
			continue
		}
		if m, ok := c.models[name[:i]]; ok {
			return m.clone(), true
		}
	}
	return Model{}, false
}

// Window returns the model's context window in tokens, 0 when unknown.
func (c *Catalog) Window(model string) int {
	m, _ := c.Lookup(model)
	return m.Window
}

// Cost returns what u cost on the model in USD, at list price. It reports
// ok=false, and a cost of 0, when the model or its price is unknown or a
// token count is negative. For sums use CostMicros.
func (c *Catalog) Cost(model string, u chat.Usage) (usd float64, ok bool) {
	p, ok := c.price(model, u)
	if !ok {
		return 0, false
	}
	usd = (float64(u.InputTokens)*p.Input +
		float64(u.OutputTokens)*p.Output +
		float64(u.CacheReadTokens)*p.CacheRead +
		float64(u.CacheWriteTokens)*p.CacheWrite) / 1e6
	return usd, true
}

// CostMicros returns what u cost on the model in micro-USD (millionths of
// a dollar), rounded half up once per call. The arithmetic is exact for
// prices with at most six decimals, so budgets should keep running sums
// of CostMicros rather than of Cost. It reports ok=false when the model
// or its price is unknown, a token count is negative, or the cost does
// not fit an int64.
func (c *Catalog) CostMicros(model string, u chat.Usage) (micros int64, ok bool) {
	p, ok := c.price(model, u)
	if !ok {
		return 0, false
	}
	// A price in USD per million tokens is micro-USD per token; scaled by
	// 1e6 it is an integer number of pico-USD per token.
	var hi, lo uint64
	for _, t := range []struct {
		tokens int64
		price  float64
	}{
		{u.InputTokens, p.Input},
		{u.OutputTokens, p.Output},
		{u.CacheReadTokens, p.CacheRead},
		{u.CacheWriteTokens, p.CacheWrite},
	} {
		h, l := bits.Mul64(uint64(t.tokens), uint64(math.Round(t.price*1e6)))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, carry = bits.Add64(hi, h, carry)
		if carry != 0 {
			return 0, false
		}
	}
	// Round half up: add half a micro-USD, then divide.
	var carry uint64
	lo, carry = bits.Add64(lo, 500_000, 0)
	hi, carry = bits.Add64(hi, 0, carry)
	if carry != 0 || hi >= 1_000_000 {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, 1_000_000)
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// price returns the model's usable price, if it has one and u's counts
// are not negative.
func (c *Catalog) price(model string, u chat.Usage) (Price, bool) {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheWriteTokens < 0 {
		return Price{}, false
	}
	m, ok := c.Lookup(model)
	if !ok || m.Price == nil || !m.Price.valid() {
		return Price{}, false
	}
	return *m.Price, true
}

// With returns a copy of c in which the overrides replace or add entries;
// c itself is unchanged. An override inherits what c would have found for
// its name (by exact name or prefix): a Window of zero or less keeps that
// window and a nil Price keeps that price. An override that leaves both
// unknown adds nothing.
func (c *Catalog) With(overrides map[string]Model) *Catalog {
	out := &Catalog{models: make(map[string]Model)}
	if c != nil {
		out.models = maps.Clone(c.models)
		if out.models == nil {
			out.models = make(map[string]Model)
		}
	}
	for name, o := range overrides {
		k := normalize(name)
		if k == "" {
			continue
		}
		m, _ := c.Lookup(k)
		if o.Window > 0 {
			m.Window = o.Window
		}
		if o.Price != nil {
			p := *o.Price
			m.Price = &p
		}
		if m.Window > 0 || m.Price != nil {
			out.models[k] = m
		}
	}
	return out
}

// Names lists the catalog's model names (normalized), sorted.
func (c *Catalog) Names() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.models))
}
