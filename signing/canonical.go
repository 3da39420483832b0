package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Request is what a signature covers besides its timestamp, nonce and
// body: the method, the path, the query string as sent, and every
// X-Sluice-* header but the signature's own three, since each of them
// changes what the request does (X-Sluice-Async queues it,
// X-Sluice-Priority weighs it, X-Sluice-Callback-URL says where its answer
// goes, and so on).
type Request struct {
	Method string
	Path   string      // escaped, without the query: URL.EscapedPath()
	Query  string      // the raw query string as sent, without "?": URL.RawQuery
	Header http.Header // its X-Sluice-* headers, but the signature's own three, are covered
}

// RequestOf is what a signature of r covers.
func RequestOf(r *http.Request) Request {
	return Request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header}
}

// coveredPrefix starts the name of every header a signature covers.
const coveredPrefix = "x-sluice-"

// field is one covered header: its lower-case name and its value without
// the spaces and tabs around it.
type field struct{ name, value string }

// coveredFields returns h's covered headers sorted by name. A covered
// header sent more than once is refused: which of its values counts would
// be the reader's guess.
func coveredFields(h http.Header) ([]field, error) {
	fields, name, n := collect(h)
	if n > 1 {
		return nil, refuse(ReasonInvalid, name+" is sent "+strconv.Itoa(n)+" times; send each X-Sluice-* header once.")
	}
	return fields, nil
}

// collect returns h's covered headers, each with its first value, sorted
// by name, and a header sent more than once (its name and how many times;
// n is 1 when there is none).
func collect(h http.Header) (fields []field, name string, n int) {
	n = 1
	for k, vs := range h {
		if len(k) < len(coveredPrefix) || !strings.EqualFold(k[:len(coveredPrefix)], coveredPrefix) || len(vs) == 0 {
			continue
		}
		lower := strings.ToLower(k)
		if lower == "x-sluice-timestamp" || lower == "x-sluice-nonce" || lower == "x-sluice-signature" {
			continue
		}
		if len(vs) > n {
			name, n = lower, len(vs)
		}
		fields = append(fields, field{lower, strings.Trim(vs[0], " \t")})
	}
	slices.SortFunc(fields, func(a, b field) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(fields); i++ {
		if fields[i].name == fields[i-1].name && n < 2 { // keys that differ only in case
			name, n = fields[i].name, 2
		}
	}
	return fields, name, n
}

// Sign returns the hex HMAC-SHA256, keyed by secret, of a request without
// a query string or covered headers:
// METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body)). That is what a client
// sends as X-Sluice-Signature; SignRequest signs any request.
func Sign(secret []byte, method, path string, timestamp int64, nonce string, body []byte) string {
	return SignRequest(secret, Request{Method: method, Path: path}, timestamp, nonce, body)
}

// SignRequest returns the hex HMAC-SHA256, keyed by secret, of r's
// canonical text (see Canonical): what a client sends as X-Sluice-Signature.
// A covered header sent twice is signed as its first value, which the
// server refuses anyway.
func SignRequest(secret []byte, r Request, timestamp int64, nonce string, body []byte) string {
	return hex.EncodeToString(macOf(secret, Canonical(r, timestamp, nonce, body)))
}

// Canonical returns the text a signature of r is the HMAC of:
//
//	METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body))
//
// and then, only when the request has a query string or a covered header,
//
//	\nQUERY\n
//
// followed by name:value\n for each covered header, names lower-cased and
// sorted, values without the spaces and tabs around them. A request
// without either signs exactly as before they were covered.
func Canonical(r Request, timestamp int64, nonce string, body []byte) []byte {
	return canonicalOf(r, timestamp, nonce, sha256.Sum256(body))
}

func canonicalOf(r Request, timestamp int64, nonce string, sum [sha256.Size]byte) []byte {
	fields, _, _ := collect(r.Header)
	s := signed{method: r.Method, path: r.Path, timestamp: strconv.FormatInt(timestamp, 10), nonce: nonce, sum: sum,
		query: r.Query, fields: fields}
	return s.text(s.all())
}

// signed is a signed request's parts, and which of its query and covered
// headers a candidate text includes (a bit each, the query first).
type signed struct {
	method, path, timestamp, nonce string
	sum                            [sha256.Size]byte
	query                          string
	fields                         []field
}

// extras is how many parts beyond the fixed five the request has: its
// query string (when there is one) and each covered header.
func (s *signed) extras() int {
	n := len(s.fields)
	if s.query != "" {
		n++
	}
	return n
}

// all is the set of every extra part.
func (s *signed) all() uint64 { return 1<<s.extras() - 1 }

// text writes the canonical text of the request with only the extra parts
// in set.
func (s *signed) text(set uint64) []byte {
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], s.sum[:])
	b := make([]byte, 0, 128)
	for _, part := range [...]string{s.method, s.path, s.timestamp, s.nonce} {
		b = append(b, part...)
		b = append(b, '\n')
	}
	b = append(b, hexSum[:]...)
	if set == 0 {
		return b
	}
	bit := uint64(1)
	b = append(b, '\n')
	if s.query != "" {
		if set&bit != 0 {
			b = append(b, s.query...)
		}
		bit <<= 1
	}
	b = append(b, '\n')
	for _, f := range s.fields {
		if set&bit != 0 {
			b = append(b, f.name...)
			b = append(b, ':')
			b = append(b, f.value...)
			b = append(b, '\n')
		}
		bit <<= 1
	}
	return b
}

// names lists the extra parts in set, for a message.
func (s *signed) names(set uint64) []string {
	var out []string
	bit := uint64(1)
	if s.query != "" {
		if set&bit != 0 {
			out = append(out, "the query string")
		}
		bit <<= 1
	}
	for _, f := range s.fields {
		if set&bit != 0 {
			out = append(out, f.name)
		}
		bit <<= 1
	}
	return out
}

func macOf(secret, text []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(text)
	return m.Sum(nil)
}

// Past these, a signature that does not match is not searched for the
// parts it leaves out (2^parts HMACs of up to this many bytes each).
const (
	maxSearchParts = 8
	maxSearchBytes = 8 << 10
)

// uncovered returns the extra parts a signature leaves out when it is the
// signature of the request without some of them (the largest such set of
// parts that matches), and false when it matches none: then it is simply
// wrong.
func (s *signed) uncovered(m hash.Hash, sig []byte) (uint64, bool) {
	n := s.extras()
	if n == 0 || n > maxSearchParts || len(s.text(s.all())) > maxSearchBytes {
		return 0, false
	}
	all := s.all()
	sets := make([]uint64, 0, all)
	for set := uint64(0); set < all; set++ {
		sets = append(sets, set)
	}
	// The most parts first: the smallest set of parts left out.
	slices.SortStableFunc(sets, func(a, b uint64) int { return bits.OnesCount64(b) - bits.OnesCount64(a) })
	for _, set := range sets {
		m.Reset()
		m.Write(s.text(set))
		if hmac.Equal(m.Sum(nil), sig) {
			return all &^ set, true
		}
	}
	return 0, false
}

// list joins names as a sentence does: "a", "a and b", "a, b and c".
func list(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
