package completion

import (
	"bytes"
	"encoding/base64"
	"image"
	_ "image/gif" // image sizes of data: URLs
	_ "image/jpeg"
	_ "image/png"
	"unicode/utf8"

	_ "golang.org/x/image/webp"

	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/jsonwalk"
	"github.com/sluicehq/sluice/quota"
)

// Prompt is what a request's prompt will be billed at most, and what the
// value rules read of it. Everything a provider bills is counted: message
// texts, names, tool calls and tool results, tool and function
// definitions, response schemas, predicted outputs and images, and each
// message's framing; with the family's own tokenizer where Sluice has it
// (family.Family.Exact), so the count is never below the provider's, with
// chat's approximation elsewhere.
type Prompt struct {
	Tokens int64
	// Predicted is a predicted output's tokens: what it rejects is billed
	// as completion tokens, on top of the answer.
	Predicted int64
	Family    family.Family
	// Unbounded names the first part whose cost cannot be known before
	// the provider answers (an audio or file part, a part of a type Sluice
	// does not know); "" when there is none. Such a request is refused
	// when a limit relies on its estimate.
	Unbounded, UnboundedType string

	texts []textPiece // the message texts, in order, for the value rules
}

// textPiece is one message text of the body and its shape.
type textPiece struct {
	at    span // its JSON string
	shape quota.TextShape
}

// count counts what the walk found: the texts and JSON values, from the
// cache when they were counted before, the images by the family's
// formula, and the fixed overheads.
func (p *Pipeline) count(sc *scanner, fam family.Family) Prompt {
	s, body := &sc.scan, sc.body
	out := Prompt{Tokens: s.fixed, Family: fam, Unbounded: s.unbounded, UnboundedType: s.unboundedType, texts: make([]textPiece, len(s.texts))}
	for i, t := range s.texts {
		c := p.countJSON(sc, fam, t.in(body), true)
		out.Tokens += int64(c.tokens)
		out.texts[i] = textPiece{at: t, shape: c.shape}
	}
	for _, r := range s.raws {
		out.Tokens += int64(p.countJSON(sc, fam, r.in(body), false).tokens)
	}
	if s.prediction.end > 0 {
		out.Predicted = int64(p.countJSON(sc, fam, s.prediction.in(body), false).tokens)
	}
	for _, img := range s.images {
		w, h := imageSize(sc, img.url.in(body))
		out.Tokens += fam.ImageTokens(w, h, img.detail)
	}
	if s.tools > 0 {
		out.Tokens += fam.ToolsPrompt
	}
	return out
}

// countJSON counts one JSON value: a string's text (isText), or any value
// as the JSON it is (tools, schemas: their JSON has more tokens than the
// form a provider renders them in). Long ones go through the cache.
func (p *Pipeline) countJSON(sc *scanner, fam family.Family, raw []byte, isText bool) counted {
	var key uint64
	cached := p.counts != nil && len(raw) >= countCacheMin
	if cached {
		key = p.counts.key(fam.Name, raw)
		if c, ok := p.counts.get(key, len(raw)); ok {
			return c
		}
	}
	c := counted{length: len(raw)}
	if isText {
		text := raw[1 : len(raw)-1]
		if bytes.IndexByte(text, '\\') >= 0 || !utf8.Valid(text) {
			sc.scratch = jsonwalk.AppendText(sc.scratch[:0], text, -1)
			text = sc.scratch
		}
		c.tokens, c.shape = fam.Counter.Count(text), quota.ShapeOf(text)
	} else {
		c.tokens = fam.Counter.Count(raw)
	}
	if cached {
		p.counts.put(key, c)
	}
	return c
}

// shape is what the value rules read of the request's texts, after those
// of history (a conversation's stored turns, in front of them).
func (r *Request) shape(history []string) quota.PromptShape {
	var ps quota.PromptShape
	for _, h := range history {
		ps.AddText([]byte(h))
	}
	var sample []byte
	for _, t := range r.Prompt.texts {
		if ps.Sampled() {
			ps.Add(nil, t.shape)
			continue
		}
		// Only the first characters are sampled: enough of them.
		sample = jsonwalk.AppendText(sample[:0], t.at.in(r.Body)[1:t.at.end-t.at.start-1], 256)
		ps.Add(sample, t.shape)
	}
	return ps
}

// imageSize reads the width and height of an image sent inline as a
// base64 data: URL (its header is enough), 0, 0 for one sent by address
// or one that does not decode: Sluice fetches nothing on a client's
// behalf, and the worst case is reserved instead.
func imageSize(sc *scanner, raw []byte) (w, h int64) {
	url := raw[1 : len(raw)-1]
	if !bytes.HasPrefix(url, []byte("data:")) {
		return 0, 0
	}
	if bytes.IndexByte(url, '\\') >= 0 {
		sc.scratch = jsonwalk.AppendText(sc.scratch[:0], url, -1)
		url = sc.scratch
	}
	i := bytes.Index(url, []byte(";base64,"))
	if i < 0 {
		return 0, 0
	}
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, bytes.NewReader(url[i+len(";base64,"):])))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0
	}
	return int64(cfg.Width), int64(cfg.Height)
}
