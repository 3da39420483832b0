package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The kinds of provider a key may belong to: the wire format the pool
// speaks to it.
const (
	KindOpenAI    = "openai" // any OpenAI-compatible API root, e.g. https://api.openai.com/v1
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
	KindAzure     = "azure"
)

// The endpoints a Request may be for, as paths under an OpenAI API root.
const (
	ChatCompletions = "chat/completions"
	Embeddings      = "embeddings"
)

// A wireFormat is how the pool speaks to one kind of provider. The pool's
// requests and answers are OpenAI's (chat completions, embeddings), which
// is what the pipeline reads and writes; a wireFormat translates them to
// the provider's own and back, so that retries, pacing, breakers and
// settlement work the same for every kind. Formats are stateless.
type wireFormat interface {
	// check says whether base is a usable API root for the provider, and
	// if not, why, in words for the admin.
	check(base *url.URL) error
	// newRequest builds the HTTP request of req for key k at base: URL,
	// authentication and version headers, the body translated. An
	// *apperr.Error (a feature the provider cannot do, named) reaches the
	// client as is; no attempt is made. A format whose provider cannot
	// embed refuses req.Endpoint Embeddings so (refuseEmbeddings).
	newRequest(ctx context.Context, k *Key, base *url.URL, req Request) (*http.Request, error)
	// limits rewrites the provider's rate-limit headers, in place, as
	// OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} (a
	// reset as a duration, "1.5s"), before the pool learns from them.
	limits(h http.Header, now time.Time)
	// answer translates a whole 2xx answer to OpenAI's JSON.
	answer(req Request, body []byte) ([]byte, error)
	// failure translates a non-2xx answer's body to OpenAI's error JSON:
	// what the client is shown of a provider's refusal, in its dialect.
	failure(status int, body []byte) []byte
	// stream wraps a 2xx event stream so that it reads as OpenAI's chat
	// completion chunks, the usage chunk (choices empty, usage set) last,
	// then "data: [DONE]".
	stream(req Request, body io.ReadCloser) io.ReadCloser
}

// A nativeFormat is a wire format whose provider's own dialect a client
// may speak (Request.Native): its newRequest sends such a body as it came,
// and a whole answer to it is read, not translated.
type nativeFormat interface {
	wireFormat
	// readNative reads a 2xx answer to a Native body; an error is an
	// answer that cannot be used.
	readNative(body []byte) (Completion, error)
	// streamNative is a 2xx stream to a Native body, passed on as it came
	// but read as stream reads it for how it ends.
	streamNative(req Request, body io.ReadCloser) io.ReadCloser
}

// formats are the wire formats by kind.
var formats = map[string]wireFormat{
	KindOpenAI:    openAIFormat{},
	KindAnthropic: anthropicFormat{now: time.Now}, // anthropic.go
	KindGemini:    geminiFormat{now: time.Now},
	KindAzure:     azureFormat{},
}

// Kinds are the kinds of provider the pool can speak to, in the order the
// admin pages offer them.
func Kinds() []string {
	out := make([]string, 0, len(formats))
	for _, k := range []string{KindOpenAI, KindAnthropic, KindGemini, KindAzure} {
		if _, ok := formats[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// formatOf is kind's format; "" is OpenAI's.
func formatOf(kind string) (wireFormat, bool) {
	if kind == "" {
		kind = KindOpenAI
	}
	f, ok := formats[kind]
	return f, ok
}

// CheckBaseURL says whether base is a usable API root for a provider of
// kind, in words for the admin who typed it.
func CheckBaseURL(kind, base string) error {
	f, ok := formatOf(kind)
	if !ok {
		return errors.New("provider must be one of " + strings.Join(Kinds(), ", "))
	}
	u, err := parseBase(base)
	if err != nil {
		return err
	}
	return f.check(u)
}

// parseBase reads a key's base URL: absolute, http or https.
func parseBase(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("base_url must be an absolute http(s) URL")
	}
	return u, nil
}

// postJSON is a provider request: POST of a JSON body, asking for an
// event stream or JSON as req wants.
func postJSON(ctx context.Context, u string, body []byte, stream bool) (*http.Request, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	} else {
		hreq.Header.Set("Accept", "application/json")
	}
	return hreq, nil
}

// openAIFormat is OpenAI's own API and every compatible one: the base URL
// is the API root ("https://api.openai.com/v1"), a path prefix such as
// /openai/v1 and any query kept; nothing is translated but the chat
// form's Anthropic extensions (extensions.go).
type openAIFormat struct{}

func (openAIFormat) check(*url.URL) error { return nil }

// openAIBody is req's body as an OpenAI-compatible API is sent it.
func openAIBody(req Request) ([]byte, error) {
	if req.endpoint() != ChatCompletions {
		return req.Body, nil
	}
	return openAIChatBody(req.Body)
}

func (openAIFormat) newRequest(ctx context.Context, k *Key, base *url.URL, req Request) (*http.Request, error) {
	body, err := openAIBody(req)
	if err != nil {
		return nil, err
	}
	hreq, err := postJSON(ctx, base.JoinPath(req.endpoint()).String(), body, req.Stream)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Authorization", "Bearer "+k.Secret)
	return hreq, nil
}

func (openAIFormat) limits(http.Header, time.Time)                      {}
func (openAIFormat) answer(_ Request, body []byte) ([]byte, error)      { return body, nil }
func (openAIFormat) failure(_ int, body []byte) []byte                  { return body }
func (openAIFormat) stream(_ Request, body io.ReadCloser) io.ReadCloser { return body }

// azureFormat is Azure OpenAI: OpenAI's wire format at a deployment. The
// base URL is the deployment's root with its api-version, as Azure's
// documentation gives it:
// https://<resource>.openai.azure.com/openai/deployments/<deployment>?api-version=2024-10-21.
// The key goes in the api-key header; the deployment, not the body's
// model, decides the model. Azure states remaining requests and tokens in
// OpenAI's headers.
type azureFormat struct{}

func (azureFormat) check(base *url.URL) error {
	if !strings.Contains(base.Path, "/deployments/") {
		return errors.New("an Azure base_url is the deployment's: https://<resource>.openai.azure.com/openai/deployments/<deployment>?api-version=<version>")
	}
	if base.Query().Get("api-version") == "" {
		return errors.New("an Azure base_url needs its api-version, e.g. ?api-version=2024-10-21")
	}
	return nil
}

func (azureFormat) newRequest(ctx context.Context, k *Key, base *url.URL, req Request) (*http.Request, error) {
	body, err := openAIBody(req)
	if err != nil {
		return nil, err
	}
	hreq, err := postJSON(ctx, base.JoinPath(req.endpoint()).String(), body, req.Stream)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("api-key", k.Secret)
	return hreq, nil
}

func (azureFormat) limits(http.Header, time.Time)                      {}
func (azureFormat) answer(_ Request, body []byte) ([]byte, error)      { return body, nil }
func (azureFormat) failure(_ int, body []byte) []byte                  { return body }
func (azureFormat) stream(_ Request, body io.ReadCloser) io.ReadCloser { return body }
