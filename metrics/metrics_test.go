package metrics

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/chat"
)

// A client naming made-up models (refused by the provider) adds no series:
// only models answered with a 2xx become label values, at most MaxModels of
// them; the rest count as "other".
func TestTheModelLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGateway(reg)
	g.Request("/v1/chat/completions", 200, "free", "gpt-4o", time.Millisecond, 0)
	for i := range 5000 {
		g.Request("/v1/chat/completions", 404, "free", "made-up-"+strconv.Itoa(i), time.Millisecond, 0)
	}
	g.Request("/v1/chat/completions", 429, "free", "gpt-4o", time.Millisecond, 0)
	if n := testutil.CollectAndCount(g.requests); n != 3 {
		t.Fatalf("%d request series; want gpt-4o 2xx, gpt-4o 4xx and other 4xx", n)
	}
	if v := testutil.ToFloat64(g.requests.WithLabelValues("/v1/chat/completions", "4xx", "free", "other")); v != 5000 {
		t.Fatalf("other: %v", v)
	}
	if v := testutil.ToFloat64(g.requests.WithLabelValues("/v1/chat/completions", "4xx", "free", "gpt-4o")); v != 1 {
		t.Fatalf("a known model's 429 keeps its label: %v", v)
	}
	// Served models beyond the bound (gpt-4o is one of it) are "other"
	// too, in both series.
	for i := range MaxModels + 50 {
		g.Tokens("free", "served-"+strconv.Itoa(i), chat.Usage{PromptTokens: 1, CompletionTokens: 1})
	}
	if n := testutil.CollectAndCount(g.tokens); n != 2*MaxModels {
		t.Fatalf("%d token series; want prompt and completion for %d models and other", n, MaxModels-1)
	}
	if v := testutil.ToFloat64(g.tokens.WithLabelValues("prompt", "free", "other")); v != 51 {
		t.Fatalf("tokens of models past the bound: %v", v)
	}
}
