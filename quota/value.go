package quota

import (
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// ValueRules price low-value requests: traffic that costs the upstream a full
// request while carrying little, typical of scripts probing or farming a free
// token. Each rule adds its extra to the request's base weight, so such a
// token drains its bucket (and reaches its freeze threshold) sooner. A zero
// extra or a zero threshold disables its rule. The rules, applied to the
// prompt text:
//
//   - Tiny: fewer than TinyChars non-space characters -> +TinyExtra.
//   - Low diversity: at least 20 non-space characters, and among the first 64
//     of them (lowercased) the share of distinct characters is below
//     MinDistinctRatio -> +LowDiversityExtra. Sampling a fixed 64 keeps the
//     ratio independent of length: ordinary text in any script has 20 or more
//     distinct characters in 64, "aaaa…" or "test test test…" a handful.
//   - Repeat: the normalised prompt (lowercased, digits removed, whitespace
//     collapsed, so "Question 1" and "question  2" match) equals one of the
//     same token's last 8 prompts seen within RepeatWindow -> +RepeatExtra.
//     Near-identical prompts in a loop are what a response cache or a batch
//     call should serve, not fresh generations.
//   - Cap: the extras never raise the weight above MaxWeight (0 = no cap); a
//     base weight already above it is left as it is.
type ValueRules struct {
	TinyChars         int
	TinyExtra         int64
	MinDistinctRatio  float64
	LowDiversityExtra int64
	RepeatWindow      time.Duration
	RepeatExtra       int64
	MaxWeight         int64
}

// DefaultValueRules are the documented defaults: under 8 characters +1, a
// distinct-character ratio under 0.2 +1, a repeat within 5 minutes +2, and a
// weight of at most 5 (well inside the free tier's capacity of 30, so a
// weighted request can always be admitted eventually).
func DefaultValueRules() ValueRules {
	return ValueRules{
		TinyChars:         8,
		TinyExtra:         1,
		MinDistinctRatio:  0.2,
		LowDiversityExtra: 1,
		RepeatWindow:      5 * time.Minute,
		RepeatExtra:       2,
		MaxWeight:         5,
	}
}

const (
	diversityMinChars = 20 // shorter prompts are judged by the tiny rule only
	diversitySample   = 64 // characters sampled for the distinct ratio
	repeatHistory     = 8  // prompts remembered per token
	scorerStripes     = 32
)

// ValueScorer weighs requests by ValueRules. It remembers a fingerprint (a
// 64-bit hash, never the text) of each token's last few prompts for the
// repeat rule; tokens silent for RepeatWindow are evicted as the map grows.
// Safe for concurrent use; tokens hash onto independent locks.
type ValueScorer struct {
	rules   ValueRules
	now     func() time.Time
	stripes [scorerStripes]scorerStripe
}

type scorerStripe struct {
	mu      sync.Mutex
	tokens  map[string]*promptHistory
	sweepAt int
}

// promptHistory is a ring of one token's recent prompt fingerprints.
type promptHistory struct {
	last int64 // unix nanoseconds of the newest entry
	n    int   // filled slots
	next int   // slot the next entry overwrites
	fp   [repeatHistory]uint64
	at   [repeatHistory]int64
}

// NewValueScorer returns a scorer applying rules. now is the clock for the
// repeat window; nil means time.Now.
func NewValueScorer(rules ValueRules, now func() time.Time) *ValueScorer {
	if now == nil {
		now = time.Now
	}
	return &ValueScorer{rules: rules, now: now}
}

// Weight returns base plus the extras prompt earns under the rules (see
// ValueRules), and records the prompt for tokenKey's repeat rule. The result
// may still exceed a small bucket's capacity; callers clamp it to the tier's.
func (v *ValueScorer) Weight(tokenKey string, prompt *PromptShape, base int64) int64 {
	r := v.rules
	var extra int64
	if prompt.chars < r.TinyChars {
		extra += r.TinyExtra
	}
	if prompt.chars >= diversityMinChars && float64(prompt.distinct)/float64(prompt.sampled) < r.MinDistinctRatio {
		extra += r.LowDiversityExtra
	}
	if r.RepeatWindow > 0 && v.seenRecently(tokenKey, prompt.print) {
		extra += r.RepeatExtra
	}
	w := base + extra
	if r.MaxWeight > 0 && w > r.MaxWeight {
		w = max(base, r.MaxWeight)
	}
	return w
}

// seenRecently reports whether fp is among tokenKey's recent prompts, then
// records it.
func (v *ValueScorer) seenRecently(tokenKey string, fp uint64) bool {
	now := v.now().UnixNano()
	cutoff := now - int64(v.rules.RepeatWindow)
	st := &v.stripes[stripeOf(tokenKey, scorerStripes)]
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.tokens[tokenKey]
	if h == nil {
		if st.tokens == nil {
			st.tokens = make(map[string]*promptHistory)
		}
		if len(st.tokens) >= max(st.sweepAt, minStripeSweep) {
			for k, old := range st.tokens {
				if old.last <= cutoff {
					delete(st.tokens, k)
				}
			}
			st.sweepAt = 2 * len(st.tokens)
		}
		h = new(promptHistory)
		st.tokens[tokenKey] = h
	}
	seen := false
	for i := 0; i < h.n; i++ {
		if h.fp[i] == fp && h.at[i] > cutoff {
			seen = true
			break
		}
	}
	h.fp[h.next], h.at[h.next] = fp, now
	h.next = (h.next + 1) % repeatHistory
	h.n = min(h.n+1, repeatHistory)
	h.last = now
	return seen
}

// PromptShape is what the rules read of a prompt, gathered text by text
// (a conversation's messages, in order) without keeping any of it: its
// non-space characters, the distinct ones among the first 64, and a
// fingerprint of its normalised form. The zero value is an empty prompt.
type PromptShape struct {
	chars    int // non-space characters
	sampled  int // characters in the diversity sample: min(chars, 64)
	distinct int // distinct characters in the sample
	ascii    [2]uint64
	others   [diversitySample]rune // distinct non-ASCII characters of the sample
	nOthers  int
	print    uint64
}

// TextShape is what the rules need of one text of a prompt, worth
// remembering for a text seen again (a conversation's earlier turns): its
// non-space characters and the FNV-1a hash of its normalised form
// (lower-cased, digits dropped, runs of spaces one space, no space at the
// ends).
type TextShape struct {
	Chars int
	Print uint64
}

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// Add adds one text of the prompt. s is ShapeOf(text), perhaps remembered
// from an earlier request; text itself is read only while the diversity
// sample is not full (see Sampled), so it may then be nil.
func (p *PromptShape) Add(text []byte, s TextShape) {
	if p.print == 0 {
		p.print = offset64
	}
	p.chars += s.Chars
	p.print = (p.print ^ s.Print) * prime64
	for i := 0; i < len(text) && p.sampled < diversitySample; {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(text[i:])
		}
		i += size
		if unicode.IsSpace(r) {
			continue
		}
		r = unicode.ToLower(r)
		p.sampled++
		if r < 128 {
			if bit := uint64(1) << (r % 64); p.ascii[r/64]&bit == 0 {
				p.ascii[r/64] |= bit
				p.distinct++
			}
		} else if !containsRune(p.others[:p.nOthers], r) {
			p.others[p.nOthers] = r
			p.nOthers++
			p.distinct++
		}
	}
}

// AddText adds a text whose shape is not known yet.
func (p *PromptShape) AddText(text []byte) { p.Add(text, ShapeOf(text)) }

// Sampled says whether the diversity sample is full, so the next texts'
// bytes are not needed by Add.
func (p *PromptShape) Sampled() bool { return p.sampled >= diversitySample }

// ShapeOf is a text's shape, in one pass over it.
func ShapeOf(text []byte) TextShape {
	var (
		s     TextShape
		space bool // whitespace pending in the normalised form
		wrote bool // anything written to the normalised form yet
	)
	h := uint64(offset64)
	for i := 0; i < len(text); {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(text[i:])
		}
		i += size
		switch {
		case r < utf8.RuneSelf:
			switch c := asciiKind[r]; c {
			case kindSpace:
				space = wrote
				continue
			case kindDigit:
				s.Chars++
				continue
			case kindUpper:
				r += 'a' - 'A'
			}
		case unicode.IsSpace(r):
			space = wrote
			continue
		default:
			r = unicode.ToLower(r)
			if unicode.IsDigit(r) {
				s.Chars++
				continue
			}
		}
		s.Chars++
		if space {
			h = (h ^ ' ') * prime64
			space = false
		}
		h = (h ^ uint64(r)) * prime64
		wrote = true
	}
	s.Print = h
	return s
}

const (
	kindOther = iota
	kindSpace
	kindDigit
	kindUpper
)

// asciiKind classifies ASCII as ShapeOf needs it, as unicode does.
var asciiKind = func() (t [utf8.RuneSelf]uint8) {
	for b := range utf8.RuneSelf {
		switch r := rune(b); {
		case unicode.IsSpace(r):
			t[b] = kindSpace
		case unicode.IsDigit(r):
			t[b] = kindDigit
		case unicode.IsUpper(r):
			t[b] = kindUpper
		}
	}
	return t
}()

func containsRune(rs []rune, r rune) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}
