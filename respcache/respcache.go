// Package respcache caches complete answers to deterministic chat requests so
// a repeated request is served without calling (and paying) the upstream
// provider again. It decides which requests may be cached (Cacheable),
// derives an organization-scoped key from the request (Key) and stores
// answers either in process (Memory) or in Redis (Redis) behind the Cache
// interface. The gateway sets X-Cache: HIT or MISS and meters a hit as a
// cached request; what a cached request costs is billing's decision, not this
// package's.
package respcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultTTL is how long a cached answer is served when the operator does not
// configure a TTL: long enough to absorb retries and repeated evaluation
// runs, short enough that a changed upstream model is noticed quickly.
const DefaultTTL = 5 * time.Minute

// HeaderName is the request header a client uses to force caching on or off.
const HeaderName = "X-Sluice-Cache"

// keyVersion is hashed into every key so a change to the normalisation below
// cannot make an old entry answer a request it was not computed for.
const keyVersion = "respcache/v1"

// Cache stores answers by key. Implementations are safe for concurrent use;
// a miss is (nil, false, nil), and an error means the cache itself failed, in
// which case the gateway should simply call the upstream.
type Cache interface {
	// Get returns the value stored under key if it has not expired.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Set stores value under key for ttl (which must be positive).
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// Cacheable reports whether a request's answer may be cached: only a
// deterministic request can be answered from a previous answer. header is
// the value of the X-Sluice-Cache request header (case-insensitive): "on"
// forces caching, "off" forbids it, and otherwise the request is cacheable
// only when its JSON body has "temperature" present and exactly 0 (0, 0.0,
// -0, 0e5...). A missing temperature is not 0: providers default it to about
// 1, which samples.
//
// Streaming requests are cacheable too. "stream" is not part of the key, so
// the gateway stores the final assembled (non-streaming) answer and, on a
// hit, returns it directly or replays it as a stream as the client asked.
func Cacheable(body []byte, header string) bool {
	switch strings.ToLower(strings.TrimSpace(header)) {
	case "on":
		return true
	case "off":
		return false
	}
	var req struct {
		// Raw rather than json.Number, which would also accept the string "0".
		Temperature json.RawMessage `json:"temperature"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return false
	}
	t := bytes.TrimSpace(req.Temperature)
	if len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return false // absent, null, a string...
	}
	n, err := canonicalNumber(string(t))
	return err == nil && n == "0"
}

// Key returns the cache key for a request: the hex SHA-256 of the endpoint,
// the organization and the normalised JSON body. Normalising (sorted object
// keys, no whitespace, numbers in one canonical form so 0.0 and 0 are equal,
// and "user", "stream" and "stream_options" removed) makes requests that
// mean the same thing share an entry, while the organization in the hash
// keeps one organization from ever reading another's cached answers. The
// body must be a JSON object.
func Key(orgID int64, endpoint string, body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var req map[string]any
	if err := dec.Decode(&req); err != nil {
		return "", fmt.Errorf("respcache key: decode body: %w", err)
	}
	if req == nil {
		return "", errors.New("respcache key: body is not a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("respcache key: trailing data after JSON body")
	}
	// These fields do not change the answer: "user" is an end-user label for
	// abuse tracking, and "stream"/"stream_options" only change how the same
	// answer is delivered.
	delete(req, "user")
	delete(req, "stream")
	delete(req, "stream_options")
	var canon bytes.Buffer
	if err := writeCanonical(&canon, req); err != nil {
		return "", fmt.Errorf("respcache key: %w", err)
	}
	h := sha256.New()
	// Length-prefix the endpoint so no endpoint/org pair can run into
	// another's bytes.
	fmt.Fprintf(h, "%s\x00%d:%s\x00%d\x00", keyVersion, len(endpoint), endpoint, orgID)
	h.Write(canon.Bytes())
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeCanonical encodes v (as produced by a json.Decoder with UseNumber)
// deterministically. Numbers are written in canonicalNumber's form, which is
// not JSON but cannot be confused with a (quoted) string; the output is only
// ever hashed.
func writeCanonical(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case json.Number:
		n, err := canonicalNumber(string(v))
		if err != nil {
			return err
		}
		buf.WriteString(n)
	case string:
		s, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(s)
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := writeCanonical(buf, v[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value of type %T", v)
	}
	return nil
}

// canonicalNumber rewrites a JSON number as sign, significant digits and a
// decimal exponent ("-25e-2" for -0.250, "0" for any zero). It works on the
// decimal text rather than a float64 so it is exact: two different large
// integers such as seeds never collapse to the same key, and a huge exponent
// costs nothing to parse.
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 32)
		if err != nil {
			return "", fmt.Errorf("number %q: exponent out of range", s)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", fmt.Errorf("invalid number %q", s)
	}
	exp -= int64(len(frac))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10), nil
}
