package completion_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/upstream"
)

// fakeAliases is the alias table.
type fakeAliases map[string]*models.ModelAlias

func (f fakeAliases) Alias(name string) (*models.ModelAlias, bool) {
	a, ok := f[name]
	return a, ok
}

func alias(name string, fallbacks []string, targets ...string) *models.ModelAlias {
	a := &models.ModelAlias{Name: name, Fallbacks: fallbacks}
	for _, t := range targets {
		a.Targets = append(a.Targets, models.AliasTarget{Model: t, Weight: 1})
	}
	return a
}

// TestAliasPromptIsCountedByTheFamilyThatCountsHighest: an alias's prompt
// is reserved at the largest of its models' families' counts, so the
// estimate bounds whichever model answers.
func TestAliasPromptIsCountedByTheFamilyThatCountsHighest(t *testing.T) {
	r := newRig(t)
	r.deps.Aliases = fakeAliases{
		"mix":    alias("mix", []string{"gpt-4"}, "gpt-4o-mini", "claude-3-5-haiku"),
		"o200k":  alias("o200k", nil, "gpt-4o-mini"),
		"approx": alias("approx", nil, "claude-3-5-haiku"),
		"cl100k": alias("cl100k", nil, "gpt-4"),
	}
	r.rebuild()
	const messages = `"messages":[{"role":"user","content":"春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。 antidisestablishmentarianism"}]}`
	counts := map[string]int64{}
	for _, m := range []string{"o200k", "approx", "cl100k", "mix"} {
		counts[m] = r.request(`{"model":"` + m + `",` + messages).Prompt.Tokens
	}
	highest := max(counts["o200k"], counts["approx"], counts["cl100k"])
	lowest := min(counts["o200k"], counts["approx"], counts["cl100k"])
	if lowest == highest {
		t.Fatalf("the families count this prompt alike (%v): the test shows nothing", counts)
	}
	if counts["mix"] != highest {
		t.Fatalf("the alias counted %d, want the highest of its families' counts %v", counts["mix"], counts)
	}
}

// TestAliasAttemptsGetTheirOwnBody: each model an alias's request asks
// gets the client's body with its own name as the model and, when the
// bound is Sluice's, its own family's bound in its family's field; the
// reservation is the largest of those bounds; the model that answers is
// the one served, named in X-Sluice-Model.
func TestAliasAttemptsGetTheirOwnBody(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.TokensPerMinute = 100_000 // a limit relies on the bound, and it leaves room for each model's longest answer
	r.deps.Aliases = fakeAliases{"mix": alias("mix", []string{"claude-3-haiku"}, "gpt-4o-mini")}
	r.deps.Rand = func() float64 { return 0 }
	r.rebuild()
	r.provider.answer = func(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
		if req.Model == "gpt-4o-mini" {
			return nil, upstream.ErrUnavailable
		}
		return answerJSON(`{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)(ctx, req)
	}
	const body = `{"model":"mix","stream":false,"messages":[{"role":"user","content":"hello"}]}`
	req := r.request(body)
	sk := newSink()
	out, err := r.p.Complete(context.Background(), r.caller, req, sk)
	if err != nil {
		t.Fatal(err)
	}
	calls := r.provider.calls
	if len(calls) != 2 || calls[0].Model != "gpt-4o-mini" || calls[1].Model != "claude-3-haiku" {
		t.Fatalf("calls %+v", calls)
	}
	// Both models are asked within one budget: the request's bound.
	if calls[0].Budget == nil || calls[1].Budget != calls[0].Budget {
		t.Fatalf("the models' budgets %p and %p, want one shared", calls[0].Budget, calls[1].Budget)
	}
	fields := func(b []byte) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("body %q: %v", b, err)
		}
		return m
	}
	first, second := fields(calls[0].Body), fields(calls[1].Body)
	// OpenAI's own models take max_completion_tokens; claude-3-haiku's
	// longest answer is 4,096 tokens, in max_tokens.
	if first["model"] != "gpt-4o-mini" || first["max_completion_tokens"] != 16384.0 || first["max_tokens"] != nil {
		t.Fatalf("first body %s", calls[0].Body)
	}
	if second["model"] != "claude-3-haiku" || second["max_tokens"] != 4096.0 || second["max_completion_tokens"] != nil {
		t.Fatalf("second body %s", calls[1].Body)
	}
	if !strings.Contains(string(req.Body), `"model":"mix"`) {
		t.Fatalf("the client's body was changed: %s", req.Body)
	}
	if calls[0].Estimate != calls[1].Estimate || calls[0].Estimate != req.Prompt.Tokens+16384 {
		t.Fatalf("estimates %d and %d, want the prompt (%d) and the largest bound (16384)", calls[0].Estimate, calls[1].Estimate, req.Prompt.Tokens)
	}
	if out.Model != "claude-3-haiku" || sk.Header().Get("X-Sluice-Model") != "claude-3-haiku" {
		t.Fatalf("served %q, header %q", out.Model, sk.Header().Get("X-Sluice-Model"))
	}
	if evs := r.recorder.all(); len(evs) != 1 || evs[0].Model != "claude-3-haiku" {
		t.Fatalf("usage %+v", evs)
	}

	// The client's own max_completion_tokens: OpenAI's model gets the body
	// as written; DeepSeek's also gets it as max_tokens, the field its API
	// reads (ignoring the other, it would answer past the reservation).
	r.deps.Aliases = fakeAliases{"mix": alias("mix", []string{"deepseek-chat"}, "gpt-4o-mini")}
	r.rebuild()
	r.provider.calls = nil
	if _, err := r.p.Complete(context.Background(), r.caller,
		r.request(`{"model":"mix","max_completion_tokens":70,"messages":[{"role":"user","content":"hello"}]}`), newSink()); err != nil {
		t.Fatal(err)
	}
	calls = r.provider.calls
	if len(calls) != 2 || calls[1].Model != "deepseek-chat" {
		t.Fatalf("calls %+v", calls)
	}
	first, second = fields(calls[0].Body), fields(calls[1].Body)
	if first["max_completion_tokens"] != 70.0 || first["max_tokens"] != nil {
		t.Fatalf("first body %s", calls[0].Body)
	}
	if second["max_completion_tokens"] != 70.0 || second["max_tokens"] != 70.0 {
		t.Fatalf("second body %s", calls[1].Body)
	}
}

// TestAnAliasReservesItsDearestModel: an alias's reservation is made at the
// dearest prompt and output token of any model that may answer it, each
// model's own dearest (its cache writes, an hour's for a Claude model, and
// its reasoning), not only its input and output prices: a hard budget one
// picodollar short of that refuses the request, one that holds it admits it.
func TestAnAliasReservesItsDearestModel(t *testing.T) {
	const body = `{"model":"mix","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	for _, tc := range []struct {
		short    money.Amount
		admitted bool
	}{{1, false}, {0, true}} {
		r := newRig(t)
		r.deps.Aliases = fakeAliases{"mix": alias("mix", []string{"claude-3-5-haiku"}, "gpt-4o-mini")}
		r.rebuild()
		r.price("gpt-4o-mini", "1", "2", "0.5")
		claude := r.price("claude-3-5-haiku", "3", "4", "0.3")
		creation := mustPrice(t, "3.75")
		claude.CacheCreationPerMTok = &creation
		r.prices[len(r.prices)-1] = claude
		r.deps.Prices.Replace(r.prices)
		r.provider.answer = answerJSON(okAnswer(6, 10))
		prompt := r.request(body).Prompt.Tokens
		// A prompt token may be an hour's cache write of the Claude model:
		// 6 a million; an output token 4 a million.
		worst := mustPrice(t, "6").Cost(prompt) + mustPrice(t, "4").Cost(100)
		limit := worst - tc.short
		r.caller.Tier.Overage = models.OverageBill
		r.caller.Budget = models.Budget{Limit: &limit, HardStop: true}
		_, _, err := r.complete(context.Background(), body)
		if admitted := err == nil; admitted != tc.admitted {
			t.Errorf("a budget of %s against a worst case of %s: admitted %v (%v), want %v", limit, worst, admitted, err, tc.admitted)
		}
	}
}
