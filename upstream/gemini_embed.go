package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/apperr"
)

// Embeddings on a Gemini key: OpenAI's embeddings request becomes one
// batchEmbedContents call (a request per input, each naming the model,
// dimensions as outputDimensionality), and its embeddings come back as
// OpenAI's list. Gemini reports no usage for embeddings; the answer's
// usage is Sluice's count of the inputs (Request.Estimate), which is what
// the request reserved and is billed.

// geminiEmbedMax is how many inputs Gemini embeds in one call.
const geminiEmbedMax = 100

// openAIEmbeddingsRequest is what Sluice reads of an OpenAI embeddings
// body to send it to Gemini; the pipeline has checked it already.
type openAIEmbeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type geminiEmbedRequest struct {
	Model                string        `json:"model"`
	Content              geminiContent `json:"content"`
	OutputDimensionality *int          `json:"outputDimensionality,omitempty"`
}

// geminiEmbedBody is the batchEmbedContents body of an OpenAI embeddings
// request for model (a resource name, "models/…"). Token arrays are
// refused by name: they are ids of OpenAI's tokenizer, which no Gemini
// model reads.
func geminiEmbedBody(model string, body []byte) ([]byte, error) {
	var in openAIEmbeddingsRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	var texts []string
	var one string
	switch {
	case json.Unmarshal(in.Input, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(in.Input, &texts) == nil:
	default:
		return nil, apperr.Field(apperr.Invalid, "unsupported_feature", "input",
			"input: token arrays are ids of OpenAI's tokenizer, which a Gemini model cannot read; send the text")
	}
	if len(texts) > geminiEmbedMax {
		return nil, apperr.Field(apperr.Invalid, "unsupported_feature", "input",
			"input: a Gemini key embeds at most "+strconv.Itoa(geminiEmbedMax)+" inputs a request, and this one has "+
				strconv.Itoa(len(texts))+"; send them in several requests")
	}
	reqs := make([]geminiEmbedRequest, len(texts))
	for i, t := range texts {
		reqs[i] = geminiEmbedRequest{Model: model, Content: geminiContent{Parts: []geminiPart{{Text: t}}}, OutputDimensionality: in.Dimensions}
	}
	return json.Marshal(struct {
		Requests []geminiEmbedRequest `json:"requests"`
	}{reqs})
}

// geminiEmbedAnswer is OpenAI's embeddings list of a batchEmbedContents
// answer to req: each vector as Gemini wrote its numbers, or, when the
// client asked for base64, as little-endian float32s in base64 (what
// OpenAI sends, and its SDKs ask for).
func geminiEmbedAnswer(req Request, body []byte) ([]byte, error) {
	var in openAIEmbeddingsRequest
	if err := json.Unmarshal(req.Body, &in); err != nil {
		return nil, err
	}
	var answer struct {
		Embeddings []struct {
			Values json.RawMessage `json:"values"`
		} `json:"embeddings"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, err
	}
	var asked []json.RawMessage
	if json.Unmarshal(in.Input, &asked) != nil {
		asked = []json.RawMessage{in.Input} // one string
	}
	if len(answer.Embeddings) != len(asked) {
		return nil, fmt.Errorf("gemini: %d embeddings for %d inputs", len(answer.Embeddings), len(asked))
	}
	type datum struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	type usage struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []datum `json:"data"`
		Model  string  `json:"model"`
		Usage  usage   `json:"usage"`
	}{Object: "list", Data: make([]datum, len(answer.Embeddings)), Model: req.Model, Usage: usage{req.Estimate, req.Estimate}}
	for i, e := range answer.Embeddings {
		if len(bytes.TrimSpace(e.Values)) == 0 || e.Values[0] != '[' {
			return nil, errors.New("gemini: an embedding without values")
		}
		out.Data[i] = datum{Object: "embedding", Index: i, Embedding: e.Values}
		if in.EncodingFormat == "base64" {
			var vs []float32 // parsed at 32 bits: the nearest float32, as OpenAI's base64 carries
			if err := json.Unmarshal(e.Values, &vs); err != nil {
				return nil, err
			}
			raw := make([]byte, 0, 4*len(vs))
			for _, v := range vs {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
			}
			out.Data[i].Embedding = base64.StdEncoding.EncodeToString(raw)
		}
	}
	return json.Marshal(out)
}
