package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/upstream/mock"
)

// attempt is one HTTP exchange the SDK made, as its middleware saw it.
type attempt struct {
	sent, answered time.Time
	status         int
	retryCount     string // the SDK's X-Stainless-Retry-Count
	retryAfterMs   string
	retryAfter     string
}

// attempts records every exchange of one SDK call, retries included.
type attempts struct {
	mu   sync.Mutex
	list []attempt
}

func (a *attempts) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	at := attempt{sent: time.Now(), retryCount: req.Header.Get("X-Stainless-Retry-Count")}
	res, err := next(req)
	at.answered = time.Now()
	if res != nil {
		at.status = res.StatusCode
		at.retryAfterMs = res.Header.Get("retry-after-ms")
		at.retryAfter = res.Header.Get("Retry-After")
	}
	a.mu.Lock()
	a.list = append(a.list, at)
	a.mu.Unlock()
	return res, err
}

func (a *attempts) get() []attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.list)
}

// TestOpenAIGoSDK drives Sluice with the official openai-go SDK, unchanged
// but for its base URL and API key: a local completion, a provider stream
// relayed through the gateway, the model list, and the SDK's own retry on
// Sluice's 429.
func TestOpenAIGoSDK(t *testing.T) {
	t.Parallel()
	const providerKey = "sk-mock-provider" // at least 8 characters, as Sluice requires
	provider := mock.New(mock.Config{Keys: map[string]float64{providerKey: 1000}, StreamChunks: 4})
	providerSrv := httptest.NewServer(provider)
	t.Cleanup(providerSrv.Close)

	base, out, stop := start(t, map[string]string{
		"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run: %v\n%s", err, out.String())
		}
	})
	c := client{t, base}

	var admin struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin); r.StatusCode != 200 || admin.Token == "" {
		t.Fatalf("admin login: %d", r.StatusCode)
	}
	upstreamBody := `{"name":"mock","base_url":"` + providerSrv.URL + `/v1","api_key":"` + providerKey +
		`","weight":1,"rpm":60000,"tpm":10000000,"models":["gpt-4o-mini"]}`
	var up struct{ State string }
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, upstreamBody, &up); r.StatusCode != 201 {
		t.Fatalf("adding the provider key: %d %+v", r.StatusCode, up)
	}
	var signup struct{ Token string }
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"grace@example.com","password":"password123","organization":"Compilers"}`, &signup); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	newToken := func(name string) string {
		t.Helper()
		var tok struct{ Token string }
		if r := c.call("POST", "/api/tokens", signup.Token, `{"name":"`+name+`"}`, &tok); r.StatusCode != 201 || !strings.HasPrefix(tok.Token, "sk_sluice_") {
			t.Fatalf("token: %d %q", r.StatusCode, tok.Token)
		}
		return tok.Token
	}
	sdk := func(apiKey string, opts ...option.RequestOption) openai.Client {
		return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(base + "/v1"), option.WithAPIKey(apiKey)}, opts...)...)
	}
	apiKey := newToken("sdk")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)

	t.Run("chat completion from sluice-local", func(t *testing.T) {
		cl := sdk(apiKey)
		res, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "sluice-local",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a spring couplet about peace")},
		})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if len(res.Choices) != 1 || !strings.Contains(res.Choices[0].Message.Content, "上联") {
			t.Fatalf("choices: %+v", res.Choices)
		}
		if res.Model != "sluice-local" || res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") {
			t.Errorf("model %q, object %q, id %q", res.Model, res.Object, res.ID)
		}
		u := res.Usage
		if u.TotalTokens <= 0 || u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage: %+v", u)
		}
	})

	t.Run("stream from a provider and the model list", func(t *testing.T) {
		cl := sdk(apiKey)
		const prompt = "Stream a short poem about rivers"
		want := "mock reply to: " + prompt // the mock echoes up to 40 runes of the prompt
		before := provider.Stats().Keys[providerKey]
		stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "gpt-4o-mini",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var (
			text     strings.Builder
			chunks   int
			last     openai.ChatCompletionChunk
			acc      openai.ChatCompletionAccumulator
			finished string
		)
		for stream.Next() {
			ch := stream.Current()
			chunks++
			last = ch
			if !acc.AddChunk(ch) {
				t.Errorf("the accumulator refused chunk %d: %s", chunks, ch.RawJSON())
			}
			if ch.Model != "gpt-4o-mini" || ch.Object != "chat.completion.chunk" {
				t.Errorf("chunk %d: model %q, object %q", chunks, ch.Model, ch.Object)
			}
			for _, choice := range ch.Choices {
				text.WriteString(choice.Delta.Content)
				if choice.FinishReason != "" {
					finished = choice.FinishReason
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if text.String() != want {
			t.Errorf("deltas joined: %q, want %q", text.String(), want)
		}
		// Role chunk, 4 content chunks, finish chunk, usage chunk.
		if chunks != 7 || finished != "stop" {
			t.Errorf("%d chunks, finish reason %q; want 7 and stop", chunks, finished)
		}
		// The mock bills as OpenAI's cookbook counts, with o200k_base: 3 to
		// prime the reply, 3 for the message, its role and its text.
		wantPrompt, wantCompletion := int64(3+3+mock.Tokens("user")+mock.Tokens(prompt)), int64(mock.Tokens(want))
		if len(last.Choices) != 0 || last.Usage.PromptTokens != wantPrompt || last.Usage.CompletionTokens != wantCompletion ||
			last.Usage.TotalTokens != wantPrompt+wantCompletion {
			t.Errorf("final chunk: %s; want no choices and usage %d+%d", last.RawJSON(), wantPrompt, wantCompletion)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Usage.TotalTokens != wantPrompt+wantCompletion {
			t.Errorf("accumulated: %+v", acc.ChatCompletion)
		}
		after := provider.Stats().Keys[providerKey]
		if after.Requests-before.Requests != 1 || after.OK-before.OK != 1 {
			t.Errorf("the provider saw %d requests (%d ok), want 1", after.Requests-before.Requests, after.OK-before.OK)
		}

		page, err := cl.Models.List(ctx)
		if err != nil {
			t.Fatalf("Models.List: %v", err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if !slices.Contains(ids, "sluice-local") || !slices.Contains(ids, "gpt-4o-mini") {
			t.Errorf("models: %v, want sluice-local and gpt-4o-mini", ids)
		}
	})

	t.Run("the SDK retries Sluice's 429 after retry-after-ms", func(t *testing.T) {
		// One request of burst, refilled in 200 ms; no freezing, no tuning.
		var tier struct {
			Capacity     int64   `json:"capacity"`
			RefillPerSec float64 `json:"refill_per_sec"`
		}
		tierBody := `{"capacity":1,"refill_per_sec":5,"refill_floor":1,"freeze_threshold":0,"autotune":false}`
		if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, tierBody, &tier); r.StatusCode != 200 || tier.Capacity != 1 || tier.RefillPerSec != 5 {
			t.Fatalf("tier: %d %+v", r.StatusCode, tier)
		}
		// A fresh organization: a fresh, full bucket (tokens of one
		// organization share theirs).
		var other struct{ Token string }
		if r := c.call("POST", "/api/auth/signup", "", `{"email":"retry@example.com","password":"password123","organization":"Retries"}`, &other); r.StatusCode != 201 {
			t.Fatalf("signup: %d", r.StatusCode)
		}
		var tok struct{ Token string }
		if r := c.call("POST", "/api/tokens", other.Token, `{"name":"retry"}`, &tok); r.StatusCode != 201 {
			t.Fatalf("token: %d", r.StatusCode)
		}
		key := tok.Token
		params := func(prompt string) openai.ChatCompletionNewParams {
			return openai.ChatCompletionNewParams{
				Model:    "sluice-local",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
			}
		}

		var first attempts
		cl := sdk(key, option.WithMiddleware(first.middleware))
		if _, err := cl.Chat.Completions.New(ctx, params("Write a spring couplet about harvest"), option.WithMaxRetries(0)); err != nil {
			t.Fatalf("first request: %v", err)
		}
		if got := first.get(); len(got) != 1 || got[0].status != 200 {
			t.Fatalf("first request attempts: %+v", got)
		}

		// The bucket is empty: the SDK gets a 429, waits and retries.
		var second attempts
		cl = sdk(key, option.WithMiddleware(second.middleware), option.WithMaxRetries(2))
		began := time.Now()
		res, err := cl.Chat.Completions.New(ctx, params("Write a spring couplet about family"))
		elapsed := time.Since(began)
		if err != nil {
			t.Fatalf("second request, with retries: %v (attempts %+v)", err, second.get())
		}
		if !strings.Contains(res.Choices[0].Message.Content, "上联") {
			t.Errorf("second request's reply: %q", res.Choices[0].Message.Content)
		}
		got := second.get()
		if len(got) != 2 || got[0].status != 429 || got[1].status != 200 || got[0].retryCount != "0" || got[1].retryCount != "1" {
			t.Fatalf("attempts: %+v; want a 429, then a 200 on retry 1", got)
		}
		waitMs, err := strconv.Atoi(got[0].retryAfterMs)
		if err != nil || waitMs < 100 || waitMs > 200 || got[0].retryAfter != "1" {
			t.Fatalf("429 said retry-after-ms %q, Retry-After %q; want about 200 and 1", got[0].retryAfterMs, got[0].retryAfter)
		}
		wait := time.Duration(waitMs) * time.Millisecond
		if gap := got[1].sent.Sub(got[0].answered); gap < wait {
			t.Errorf("the SDK retried %v after the 429, before the %v it was told", gap, wait)
		}
		t.Logf("429 with retry-after-ms %d; the SDK retried %v later; the call took %v", waitMs, got[1].sent.Sub(got[0].answered), elapsed)
		if elapsed < wait || elapsed < 150*time.Millisecond || elapsed >= 5*time.Second {
			t.Errorf("the call took %v; want at least the %v wait, under 5s", elapsed, wait)
		}

		// Again at once, without retries: the 429 reaches the caller.
		var third attempts
		cl = sdk(key, option.WithMiddleware(third.middleware), option.WithMaxRetries(0))
		_, err = cl.Chat.Completions.New(ctx, params("Write a spring couplet about study"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("without retries: %v (%T), want *openai.Error", err, err)
		}
		if apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "rate_limit_exceeded" || apiErr.Message == "" {
			t.Errorf("error: status %d, code %q, type %q, message %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message)
		}
		if ms, err := strconv.Atoi(apiErr.Response.Header.Get("retry-after-ms")); err != nil || ms < 1 || ms > 200 {
			t.Errorf("retry-after-ms %q", apiErr.Response.Header.Get("retry-after-ms"))
		}
		if n := len(third.get()); n != 1 {
			t.Errorf("%d attempts with retries off, want 1", n)
		}
	})

	// A spent budget is final for the month: the SDK must not retry it
	// even when allowed to, which is what type insufficient_quota and
	// x-should-retry: false tell it.
	t.Run("insufficient_quota is not retried", func(t *testing.T) {
		// A fresh organization, so only its budget refuses.
		var broke struct{ Token string }
		if r := c.call("POST", "/api/auth/signup", "", `{"email":"broke@example.com","password":"password123","organization":"Broke"}`, &broke); r.StatusCode != 201 {
			t.Fatalf("signup: %d", r.StatusCode)
		}
		var tok struct{ Token string }
		if r := c.call("POST", "/api/tokens", broke.Token, `{"name":"broke"}`, &tok); r.StatusCode != 201 {
			t.Fatalf("token: %d", r.StatusCode)
		}
		if r := c.call("PUT", "/api/admin/prices/sluice-local", admin.Token, `{"input_per_mtok":"1","output_per_mtok":"2"}`, nil); r.StatusCode != 200 {
			t.Fatalf("price: %d", r.StatusCode)
		}
		if r := c.call("PUT", "/api/budget", broke.Token, `{"monthly_limit":"0.000001","hard_stop":true}`, nil); r.StatusCode != 200 {
			t.Fatalf("budget: %d", r.StatusCode)
		}
		var seen attempts
		cl := sdk(tok.Token, option.WithMiddleware(seen.middleware), option.WithMaxRetries(3))
		_, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "sluice-local", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("%v (%T), want *openai.Error", err, err)
		}
		if apiErr.StatusCode != 429 || apiErr.Code != "insufficient_quota" || apiErr.Type != "insufficient_quota" ||
			!strings.Contains(apiErr.Message, "the organization's monthly budget") || !strings.Contains(apiErr.Message, "it resets at") {
			t.Errorf("error: status %d, code %q, type %q, message %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message)
		}
		if got := seen.get(); len(got) != 1 {
			t.Fatalf("%d attempts, want 1: the SDK retried a spent budget: %+v", len(got), got)
		}
		if r := c.call("PUT", "/api/budget", broke.Token, `{"monthly_limit":null}`, nil); r.StatusCode != 200 {
			t.Fatalf("removing the budget: %d", r.StatusCode)
		}
	})
}
