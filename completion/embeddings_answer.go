package completion

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/internal/jsonwalk"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// isEmbeddings says whether the request is for embeddings.
func (r *Request) isEmbeddings() bool { return r.Endpoint == upstream.Embeddings }

// answerEmbeddingsLocally answers an embeddings request from sluice-local:
// one vector per input, in OpenAI's answer, billed at Sluice's own count
// of the inputs (which is what was reserved).
func (p *Pipeline) answerEmbeddingsLocally(c *call) Served {
	req := c.req
	e := &req.embed
	dims := e.dimensions
	out := Served{Status: http.StatusOK, Model: req.Model, delivered: true, Usage: chat.Usage{PromptTokens: int(c.prompt)}}
	perVector := dims
	if perVector == 0 {
		perVector = local.DefaultDimensions
	}
	// About 11 bytes a float, 5.4 a base64 one, and the framing.
	b := make([]byte, 0, 96+len(e.inputs)*(48+perVector*11))
	b = append(b, `{"object":"list","data":[`...)
	var text []byte
	var ids []int64
	for i, at := range e.inputs {
		raw := at.in(req.Body)
		var v []float32
		if raw[0] == '"' {
			text = jsonwalk.AppendText(text[:0], raw[1:len(raw)-1], -1)
			v = p.d.Local.EmbedText(text, dims)
		} else {
			ids = appendTokenIDs(ids[:0], raw)
			v = p.d.Local.EmbedTokens(ids, dims)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		b = appendVector(b, v, e.base64)
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b, _ = jsontext.AppendQuote(b, req.Model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, c.prompt, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, c.prompt, 10)
	b = append(b, "}}"...)
	_ = c.sink.Send(http.StatusOK, "application/json; charset=utf-8", b)
	return out
}

// appendVector writes v as OpenAI does: a JSON array of numbers, or with
// base64 the base64 of its little-endian float32s, as a JSON string.
func appendVector(b []byte, v []float32, b64 bool) []byte {
	if !b64 {
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
		}
		return append(b, ']')
	}
	raw := make([]byte, 0, 4*len(v))
	for _, x := range v {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, '"')
}

// appendTokenIDs reads an array of token ids the walk has checked (only
// digits, commas, spaces and its brackets).
func appendTokenIDs(dst []int64, raw []byte) []int64 {
	var n int64
	in := false
	for _, c := range raw {
		if c >= '0' && c <= '9' {
			n, in = n*10+int64(c-'0'), true
			continue
		}
		if in {
			dst = append(dst, n)
			n, in = 0, false
		}
	}
	return dst
}

// errNoEmbeddingsFallback is the answer to an embeddings request no
// provider could take: sluice-local does not stand in, since its vectors
// cannot be compared with the model's.
func errNoEmbeddingsFallback(model string) *apperr.Error {
	e := apperr.WithReason(apperr.Unavailable, "upstream_unavailable",
		"every provider for '"+model+"' is unavailable right now; retry later (embeddings are never answered by another model)")
	e.RetryAfter = fallbackRetryAfter
	return e
}

// embeddingsText is an embeddings request's text inputs, for the prompt log.
func (r *Request) embeddingsText() string {
	var b []byte
	for _, at := range r.embed.inputs {
		if raw := at.in(r.Body); raw[0] == '"' {
			b = jsonwalk.AppendText(b, raw[1:len(raw)-1], -1)
			b = append(b, '\n')
		}
	}
	return string(b)
}
