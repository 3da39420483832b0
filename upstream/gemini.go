package upstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// geminiVersion is the version of the Gemini API Sluice calls: v1beta,
// the one Google's own SDKs call, and the only one with JSON Schema for
// function parameters and response schemas (parametersJsonSchema,
// responseJsonSchema) and thinking settings.
const geminiVersion = "v1beta"

// geminiFormat is Google's Gemini API (generativelanguage.googleapis.com)
// spoken natively: the base URL is the API root,
// https://generativelanguage.googleapis.com, with or without /v1beta; the
// key goes in the x-goog-api-key header, never in the URL (URLs end up in
// logs). Requests are translated from OpenAI's chat completions to
// generateContent (gemini_request.go), answers and streams back to
// OpenAI's (gemini_answer.go, gemini_stream.go); embeddings to
// batchEmbedContents and back (gemini_embed.go). Gemini states no rate
// limits in headers; how long to wait after a 429 is in the error body
// (readFailure).
type geminiFormat struct {
	// now stamps the answers' created time: Gemini's answers carry none.
	now func() time.Time
}

func (geminiFormat) check(base *url.URL) error {
	if base.User != nil || base.RawQuery != "" || base.Fragment != "" {
		return errors.New("a Gemini base_url is the API root alone, https://generativelanguage.googleapis.com: the key goes in its own field, never in the URL")
	}
	switch strings.TrimSuffix(base.Path, "/") {
	case "", "/" + geminiVersion:
		return nil
	}
	return errors.New("a Gemini base_url is the API root, https://generativelanguage.googleapis.com (or with /" + geminiVersion +
		"); Sluice calls /" + geminiVersion + "/models/{model}:generateContent under it")
}

func (f geminiFormat) newRequest(ctx context.Context, k *Key, base *url.URL, req Request) (*http.Request, error) {
	model, err := geminiModelPath(req.Model)
	if err != nil {
		return nil, err
	}
	var body []byte
	u := *base
	switch req.endpoint() {
	case ChatCompletions:
		body, err = geminiRequestBody(req)
		u.Path, u.RawPath = "/"+geminiVersion+"/"+model+":generateContent", ""
		if req.Stream {
			u.Path, u.RawQuery = "/"+geminiVersion+"/"+model+":streamGenerateContent", "alt=sse"
		}
	case Embeddings:
		body, err = geminiEmbedBody(model, req.Body)
		u.Path, u.RawPath = "/"+geminiVersion+"/"+model+":batchEmbedContents", ""
	default:
		return nil, apperr.Field(apperr.Invalid, "unsupported_feature", "model",
			"'"+req.Model+"' is served by a Gemini key, which Sluice uses for chat completions and embeddings only, not "+req.endpoint())
	}
	if err != nil {
		return nil, err
	}
	hreq, err := postJSON(ctx, u.String(), body, req.Stream)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("x-goog-api-key", k.Secret)
	return hreq, nil
}

// geminiModelPath is the resource name of model in a Gemini URL:
// "models/gemini-2.5-flash" for "gemini-2.5-flash"; a name that is
// already a resource ("models/…", "tunedModels/…") is kept. Anything
// else is refused rather than pasted into a URL path.
func geminiModelPath(model string) (string, error) {
	name := model
	if !strings.Contains(name, "/") {
		name = "models/" + name
	}
	collection, id, _ := strings.Cut(name, "/")
	if (collection != "models" && collection != "tunedModels") || !isGeminiModelID(id) {
		return "", apperr.Field(apperr.Invalid, "invalid_model", "model",
			"'"+model+"' is not a Gemini model name (such as gemini-2.5-flash)")
	}
	return name, nil
}

func isGeminiModelID(id string) bool {
	if id == "" || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// limits has nothing to rewrite: Gemini sends no rate-limit headers.
func (geminiFormat) limits(http.Header, time.Time) {}

// readFailure reads what Gemini says in an error's body and OpenAI says
// with its status and headers: how long to wait after a 429 (a
// google.rpc.RetryInfo retryDelay, given to the pool as retry-after-ms
// unless a header already says), and a key it does not know, which
// Gemini answers 400 API_KEY_INVALID rather than 401 (judged as a 401, so
// the key is disabled instead of every request failing on it).
func (geminiFormat) readFailure(status int, h http.Header, head []byte) int {
	e, ok := parseGeminiError(head)
	if !ok {
		return status
	}
	if status == http.StatusTooManyRequests && h.Get("Retry-After") == "" && h.Get("retry-after-ms") == "" {
		if d, ok := e.retryDelay(); ok {
			h.Set("retry-after-ms", strconv.FormatFloat(d*1000, 'f', -1, 64))
		}
	}
	if status == http.StatusBadRequest && e.hasReason("API_KEY_INVALID") {
		return http.StatusUnauthorized
	}
	return status
}

func (geminiFormat) failure(status int, body []byte) []byte {
	return geminiFailure(status, body)
}

func (f geminiFormat) answer(req Request, body []byte) ([]byte, error) {
	if req.endpoint() == Embeddings {
		return geminiEmbedAnswer(req, body)
	}
	return geminiAnswer(req, body, geminiIDBase(req), f.created())
}

func (f geminiFormat) stream(req Request, body io.ReadCloser) io.ReadCloser {
	return newGeminiStream(req, body, geminiIDBase(req), f.created())
}

// created is an answer's created time, in Unix seconds.
func (f geminiFormat) created() int64 {
	if f.now == nil {
		return time.Now().Unix()
	}
	return f.now().Unix()
}

// geminiIDBase is what the ids of an answer are made of: the gateway's
// request id without its "req_" (as sluice-local's answers are named), so
// a retried or streamed answer names its tool calls the same way; random
// when there is none. Only letters, digits and '-' are kept: tool call
// ids carry a thought signature after "__ts_" (see toolCallID).
func geminiIDBase(req Request) string {
	var b strings.Builder
	for _, r := range strings.TrimPrefix(req.ID, "req_") {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() > 0 {
		return b.String()
	}
	var random [12]byte
	_, _ = rand.Read(random[:])
	return hex.EncodeToString(random[:])
}
