package catalog

import "math"

// PricesAsOf is the month the default table's prices were taken.
//
// The prices are the vendors' standard-tier list prices in USD per million
// tokens as published in February 2026 on
// https://docs.anthropic.com/en/docs/about-claude/pricing and
// https://platform.openai.com/docs/pricing. They were transcribed by hand
// (no program fetches them), so check them against those pages when a
// vendor changes prices, and update this date with them.
//
// Anthropic: cache writes are priced as 5-minute cache writes, 1.25× input,
// and cache reads at 0.1× input. Windows are 200,000 tokens: the 1M-token
// context beta (and its higher long-context prices) is not assumed.
//
// OpenAI: cache reads are the "cached input" price of the pricing table
// (the input price where a model has no cached-input discount), and cache
// writes cost the same as input, since OpenAI does not charge extra for
// them. Batch, flex and priority tiers are not modeled.
const PricesAsOf = "2026-02"

// anthropicWindow is the context window of every Anthropic model in the
// default table.
const anthropicWindow = 200_000

// Default returns the built-in catalog: the common Anthropic and OpenAI
// models with their context windows and list prices as of PricesAsOf.
// Variants priced differently from their family (gpt-5-pro, o3-mini, the
// first gpt-4o snapshot ...) have entries of their own so that a prefix
// match never gives them the family's price; audio and realtime variants,
// whose audio tokens chat.Usage does not count apart, have a window but
// no price.
//
// Each call returns a new catalog.
func Default() *Catalog {
	return New(defaultModels())
}

// defaultModels is the default table.
func defaultModels() map[string]Model {
	a := func(in, out float64) Model {
		return Model{Window: anthropicWindow, Price: &Price{Input: in, Output: out, CacheRead: round6(in * 0.1), CacheWrite: round6(in * 1.25)}}
	}
	// o is an OpenAI model: cache writes cost the same as input.
	o := func(window int, in, cachedIn, out float64) Model {
		return Model{Window: window, Price: &Price{Input: in, Output: out, CacheRead: cachedIn, CacheWrite: in}}
	}
	const (
		w4o  = 128_000
		w41  = 1_047_576
		wO   = 200_000
		w5   = 400_000
		w5ch = 128_000 // the gpt-5 *-chat-latest models
	)
	return map[string]Model{
		// Anthropic. Dated snapshots ("claude-sonnet-4-5-20250929") and
		// "-latest" aliases find these by prefix. The first Claude 4
		// models are listed by their dated names and "-0" aliases, never
		// as a bare "claude-opus-4", which would also match later 4.x
		// models priced differently.
		"claude-opus-4-6":          a(5, 25),
		"claude-opus-4-5":          a(5, 25),
		"claude-opus-4-1":          a(15, 75),
		"claude-opus-4-0":          a(15, 75),
		"claude-opus-4-20250514":   a(15, 75),
		"claude-sonnet-4-6":        a(3, 15),
		"claude-sonnet-4-5":        a(3, 15),
		"claude-sonnet-4-0":        a(3, 15),
		"claude-sonnet-4-20250514": a(3, 15),
		"claude-haiku-4-5":         a(1, 5),
		"claude-3-7-sonnet":        a(3, 15),
		"claude-3-5-sonnet":        a(3, 15),
		"claude-3-5-haiku":         a(0.80, 4),

		// OpenAI: window, input, cached input, output.
		"gpt-4o":                       o(w4o, 2.50, 1.25, 10),
		"gpt-4o-2024-05-13":            o(w4o, 5, 5, 15), // the first snapshot: no cache discount
		"gpt-4o-mini":                  o(w4o, 0.15, 0.075, 0.60),
		"gpt-4o-audio-preview":         {Window: w4o},
		"gpt-4o-mini-audio-preview":    {Window: w4o},
		"gpt-4o-realtime-preview":      {Window: w4o},
		"gpt-4o-mini-realtime-preview": {Window: w4o},
		"gpt-4.1":                      o(w41, 2, 0.50, 8),
		"gpt-4.1-mini":                 o(w41, 0.40, 0.10, 1.60),
		"gpt-4.1-nano":                 o(w41, 0.10, 0.025, 0.40),
		"o3":                           o(wO, 2, 0.50, 8),
		"o3-pro":                       o(wO, 20, 20, 80),
		"o3-mini":                      o(wO, 1.10, 0.55, 4.40),
		"o3-deep-research":             o(wO, 10, 2.50, 40),
		"o4-mini":                      o(wO, 1.10, 0.275, 4.40),
		"o4-mini-deep-research":        o(wO, 2, 0.50, 8),
		"gpt-5":                        o(w5, 1.25, 0.125, 10),
		"gpt-5-mini":                   o(w5, 0.25, 0.025, 2),
		"gpt-5-nano":                   o(w5, 0.05, 0.005, 0.40),
		"gpt-5-pro":                    o(w5, 15, 15, 120),
		"gpt-5-codex":                  o(w5, 1.25, 0.125, 10),
		"gpt-5-chat-latest":            o(w5ch, 1.25, 0.125, 10),
		"gpt-5.1":                      o(w5, 1.25, 0.125, 10),
		"gpt-5.1-codex":                o(w5, 1.25, 0.125, 10),
		"gpt-5.1-codex-mini":           o(w5, 0.25, 0.025, 2),
		"gpt-5.1-chat-latest":          o(w5ch, 1.25, 0.125, 10),
		"gpt-5.2":                      o(w5, 1.75, 0.175, 14),
		"gpt-5.2-pro":                  o(w5, 21, 21, 168),
		"gpt-5.2-chat-latest":          o(w5ch, 1.75, 0.175, 14),
	}
}

// round6 rounds x to six decimals, so that derived prices such as
// 0.8×0.1 are the decimal figures the vendors publish.
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
