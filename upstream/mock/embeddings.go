package mock

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
)

// mockDimensions is the size of the mock's vectors when the request asks
// for none: small, since tests read them.
const mockDimensions = 8

// embeddingsRequest is the part of an embeddings request the mock reads.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embeddingInput is one input: a text or token ids.
type embeddingInput struct {
	text   string
	tokens []int64
}

// inputs reads input in OpenAI's four forms; false for anything else.
func inputs(raw json.RawMessage) ([]embeddingInput, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []embeddingInput{{text: one}}, one != ""
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) > 0 {
		out := make([]embeddingInput, len(texts))
		for i, t := range texts {
			out[i].text = t
		}
		return out, true
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return []embeddingInput{{tokens: ids}}, true
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		out := make([]embeddingInput, len(lists))
		for i, l := range lists {
			out[i].tokens = l
		}
		return out, true
	}
	return nil, false
}

// embeddings answers POST .../embeddings as OpenAI does: a vector per
// input (deterministic: the normalised bytes of a hash of the model and
// the input), as floats or, with encoding_format base64, little-endian
// float32s in base64; usage is the inputs' tokens (a text's as the mock
// bills prompts, a token array's length). The hooks, the bucket, latency
// and failures are a chat completion's.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	s.total.requests.Add(1)
	ks := s.authorize(w, r)
	if ks == nil {
		return
	}
	ks.counts.requests.Add(1)
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "use POST for "+r.URL.Path)
		return
	}
	if s.forced(w, r, ks) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req embeddingsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a valid embeddings request: "+err.Error())
		return
	}
	in, ok := inputs(req.Input)
	dims := mockDimensions
	if req.Dimensions != nil {
		dims = *req.Dimensions
	}
	switch {
	case !ok:
		writeError(w, http.StatusBadRequest, "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.")
		return
	case req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64":
		writeError(w, http.StatusBadRequest, fmt.Sprintf("'%s' is not one of ['float', 'base64'] - 'encoding_format'", req.EncodingFormat))
		return
	case dims < 1 || dims > 4096:
		writeError(w, http.StatusBadRequest, "dimensions must be from 1 to 4096")
		return
	}
	if ks.bucket != nil {
		d := ks.bucket.take(s.now())
		setLimitHeaders(w.Header(), d, s.cfg.OmitLimitHeaders)
		if !d.ok {
			s.count(ks, http.StatusTooManyRequests)
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf(
				"Rate limit reached for requests: limit %d per minute, please try again in %s.", d.limit, formatReset(ceilMs(d.retryAfter))))
			return
		}
	}
	if !sleep(r.Context(), s.delay()) {
		return
	}
	if s.fail() {
		s.count(ks, http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, "The server had an error while processing your request (mock failure).")
		return
	}
	type datum struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	type usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []datum `json:"data"`
		Model  string  `json:"model"`
		Usage  usage   `json:"usage"`
	}{Object: "list", Data: make([]datum, len(in)), Model: req.Model}
	for i, x := range in {
		v := vector(req.Model, x, dims)
		out.Data[i] = datum{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 0, 4*len(v))
			for _, f := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			out.Data[i].Embedding = base64.StdEncoding.EncodeToString(raw)
		}
		if x.tokens != nil {
			out.Usage.PromptTokens += len(x.tokens)
		} else {
			out.Usage.PromptTokens += s.bill.count(x.text)
		}
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	s.count(ks, http.StatusOK)
	writeJSON(w, http.StatusOK, out)
}

// vector is input's unit vector of dims: the bytes of SHA-256 chained over
// the model and the input, as signed values, normalised.
func vector(model string, in embeddingInput, dims int) []float32 {
	seed := model + "\x00" + in.text
	for _, id := range in.tokens {
		seed += "\x00" + strconv.FormatInt(id, 10)
	}
	h := sha256.Sum256([]byte(seed))
	v := make([]float64, dims)
	var sum float64
	for i := range v {
		if i%len(h) == 0 && i > 0 {
			h = sha256.Sum256(h[:])
		}
		v[i] = float64(int8(h[i%len(h)])) + 0.5 // never all zero
		sum += v[i] * v[i]
	}
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(x / math.Sqrt(sum))
	}
	return out
}

// geminiEmbedBatch is a batchEmbedContents request.
type geminiEmbedBatch struct {
	Requests []struct {
		Model   string `json:"model"`
		Content struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"content"`
		OutputDimensionality *int `json:"outputDimensionality"`
	} `json:"requests"`
}

// check refuses what Gemini refuses: no requests, more than 100, one for
// another model than the URL's, one without text, dimensions out of range.
func (b geminiEmbedBatch) check(model string) error {
	if len(b.Requests) == 0 || len(b.Requests) > 100 {
		return fmt.Errorf("%d requests: send 1 to 100", len(b.Requests))
	}
	for i, r := range b.Requests {
		switch {
		case r.Model != "models/"+model:
			return fmt.Errorf("requests[%d].model %q is not the model of the URL, models/%s", i, r.Model, model)
		case len(r.Content.Parts) == 0:
			return fmt.Errorf("requests[%d].content has no parts", i)
		case r.OutputDimensionality != nil && (*r.OutputDimensionality < 1 || *r.OutputDimensionality > 3072):
			return fmt.Errorf("requests[%d].outputDimensionality must be from 1 to 3072", i)
		}
	}
	return nil
}

// embeddings is the answer to b: each request's text embedded as the
// OpenAI speaker embeds it.
func (b geminiEmbedBatch) embeddings(model string) any {
	type values struct {
		Values []float32 `json:"values"`
	}
	out := struct {
		Embeddings []values `json:"embeddings"`
	}{make([]values, len(b.Requests))}
	for i, r := range b.Requests {
		dims := mockDimensions
		if r.OutputDimensionality != nil {
			dims = *r.OutputDimensionality
		}
		var text string
		for _, p := range r.Content.Parts {
			text += p.Text
		}
		out.Embeddings[i].Values = vector(model, embeddingInput{text: text}, dims)
	}
	return out
}
