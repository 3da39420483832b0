package metering

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// PriceBook is every model's price history in memory, so pricing a request
// reads no database. It is replaced whole on every reload, and safe for
// concurrent use.
type PriceBook struct {
	byModel atomic.Pointer[map[string][]models.ModelPrice] // each model's versions, oldest first
}

// NewPriceBook returns an empty book: every model is unpriced until Replace.
func NewPriceBook() *PriceBook {
	b := &PriceBook{}
	b.Replace(nil)
	return b
}

// Load replaces the book with the store's prices.
func (b *PriceBook) Load(ctx context.Context, store *models.Store) error {
	ps, err := store.ModelPrices(ctx)
	if err != nil {
		return err
	}
	b.Replace(ps)
	return nil
}

// Replace puts ps in the book.
func (b *PriceBook) Replace(ps []models.ModelPrice) {
	m := make(map[string][]models.ModelPrice)
	for _, p := range ps {
		m[p.Model] = append(m[p.Model], p)
	}
	for _, vs := range m {
		slices.SortFunc(vs, func(a, b models.ModelPrice) int { return a.EffectiveFrom.Compare(b.EffectiveFrom) })
	}
	b.byModel.Store(&m)
}

// At is the price of model in force at t: its latest version effective at
// or before t. A model with no such version is unpriced (ok false): it costs
// nothing, and the admin pages flag it.
func (b *PriceBook) At(model string, t time.Time) (models.ModelPrice, bool) {
	vs := (*b.byModel.Load())[model]
	for i := len(vs) - 1; i >= 0; i-- {
		if !vs[i].EffectiveFrom.After(t) {
			return vs[i], true
		}
	}
	return models.ModelPrice{}, false
}

// Models lists the priced models.
func (b *PriceBook) Models() []string {
	m := *b.byModel.Load()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Cost is what usage costs at p: prompt tokens the provider did not serve
// from its prompt cache at the input price, those it did at the cached
// input price, those it wrote to it at the cache-creation price (an
// hour's writes at twice the input price, as Anthropic bills them), and
// completion tokens at the output price. Exact.
func Cost(p models.ModelPrice, u chat.Usage) money.Amount {
	prompt, completion := int64(max(u.PromptTokens, 0)), int64(max(u.CompletionTokens, 0))
	// The parts are bounded by their wholes, so a provider's odd report
	// never bills below zero.
	cached := min(int64(max(u.CachedTokens, 0)), prompt)
	creation := min(int64(max(u.CacheCreationTokens, 0)), prompt-cached)
	hour := min(int64(max(u.CacheCreationHourTokens, 0)), creation)
	reasoning := min(int64(max(u.ReasoningTokens, 0)), completion)
	return p.InputPerMTok.Cost(prompt-cached-creation) +
		p.CachedInputPerMTok.Cost(cached) +
		or(p.CacheCreationPerMTok, p.InputPerMTok).Cost(creation-hour) +
		hourCacheWrite(p).Cost(hour) +
		p.OutputPerMTok.Cost(completion-reasoning) +
		or(p.ReasoningPerMTok, p.OutputPerMTok).Cost(reasoning)
}

// hourCacheWrite is the price of a prompt cache write kept an hour:
// twice the input price, Anthropic's, and never below a five minutes'
// write.
func hourCacheWrite(p models.ModelPrice) money.Price {
	return max(2*p.InputPerMTok, or(p.CacheCreationPerMTok, 0))
}

// or is price, or def when there is none.
func or(price *money.Price, def money.Price) money.Price {
	if price == nil {
		return def
	}
	return *price
}

// WorstCase is the most a request may cost before it runs: every prompt
// token and maxCompletion tokens of output at their dearest (Dearest). It
// is what a budget reserves.
func WorstCase(p models.ModelPrice, promptTokens, maxCompletion int64) money.Amount {
	input, output := Dearest(p)
	return input.Cost(promptTokens) + output.Cost(maxCompletion)
}

// Dearest is the most one prompt token and one output token may cost at
// p: any prompt token may be written to the provider's cache (for an
// hour, by a model whose provider keeps it that long) and any output
// token may be reasoning, each at the dearest of its prices.
func Dearest(p models.ModelPrice) (input, output money.Price) {
	input = max(p.InputPerMTok, or(p.CacheCreationPerMTok, 0))
	if family.HourCacheWrites(p.Model) {
		input = max(input, hourCacheWrite(p))
	}
	return input, max(p.OutputPerMTok, or(p.ReasoningPerMTok, 0))
}
