package upstream

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// Learning a key's limits from its provider.
//
// OpenAI-compatible providers describe a key's state on every answer:
// x-ratelimit-limit-requests (per minute), -remaining-requests and
// -reset-requests (how long until the window is full again), the same for
// tokens, and Retry-After / retry-after-ms on a 429. A provider may enforce
// its per-minute limit over much shorter windows; the headers then show it:
// remaining + reset × limit/60 is the size of the provider's real bucket
// (its burst), however it words the limit.
//
// Each dimension (requests, tokens) of a key is paced by a bucket in the
// shared limiter whose refill is the lower of the configured and the
// provider's limit and whose capacity (the burst) is learned here:
//
//   - the ceiling is the provider's burst as estimated from its headers,
//     less a slack of max(1, 50 ms of refill), so requests that reach the
//     provider out of step with the order and spacing Sluice admitted them
//     in (network and scheduling jitter) are not refused; without headers
//     it is one second's worth, as before;
//   - the requests burst in force is 1 until the provider's first answer
//     (which may say the key holds less than one second's worth); from
//     then on, for both dimensions, it starts at one second's worth or the
//     ceiling, whichever is lower (a provider whose headers describe a
//     minute-long window may still enforce it per second); it halves
//     on a 429 (once per episode: a 429 for a request sent before the last
//     halving does not halve again), and grows back slowly: by
//     max(1, ceiling/16) after every 4 answered requests that found the
//     bucket empty (8 times as many for a step back to the burst that met
//     the last 429), never beyond the ceiling (AIMD);
//   - a node never sends more than the provider's remaining, refilled at
//     limit/60 since, allows: an answer saying the provider has less left
//     than the next request needs holds the key on this node until it has
//     refilled enough. In step with the provider this never binds (the
//     shared bucket is stricter); it does when some of the key's traffic is
//     not Sluice's, or the provider is behind.
//
// The learned state is per node (each node learns from the answers it gets);
// the buckets are shared. See the package README for what that means with
// several nodes.

// Tuning of the learning; see above.
const (
	// burstSamples is how many recent burst estimates are kept: the
	// provider's burst is their maximum, so an estimate rounded down now and
	// then does not shrink it, and a real decrease shows after this many
	// answers.
	burstSamples = 8
	// pacingSlack is how much of the provider's refill the learned burst
	// leaves unused (at least one request or token).
	pacingSlack = 50 * time.Millisecond
	// growAfter is how many answered requests that emptied the bucket it
	// takes to grow the burst by one step.
	growAfter = 4
	// growSteps is how many steps grow the burst from 0 to the ceiling.
	growSteps = 16
	// probeSlowdown is how much more evidence a step takes that brings the
	// burst back to where it last met a 429: without headers, that is where
	// the provider's hidden burst lies, and each probe beyond it costs a
	// 429.
	probeSlowdown = 8
	// maxResetHeader bounds a reset the pool believes: anything longer (a
	// unix timestamp, a per-day window) says nothing about pacing.
	maxResetHeader = 24 * time.Hour
)

// The header names of the two dimensions, in canonical form so that
// reading them costs a map lookup and no allocation on every answer.
var (
	requestHeaders = dimHeaders{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	tokenHeaders   = dimHeaders{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}
)

type dimHeaders struct{ limit, remaining, reset string }

// dim is one dimension of a key's limits as this node knows them. The
// owning keyHealth's mutex guards it.
type dim struct {
	configured int64 // per minute, from the key's settings; 0 = unknown

	// From the answers that carried this dimension's headers.
	limit     int64     // per minute; 0 = the provider never said
	remaining int64     // what was left, by the freshest answer
	fullAt    time.Time // its send time + reset: when the provider's window is full again
	seen      time.Time // when the last answer arrived; zero = never
	bursts    [burstSamples]int64
	next      int

	// The provider's bucket as this node sees it: what the freshest answer
	// (by send time) said was left, refilled at limit/60 since, less what
	// this node has sent since. It only ever holds a key back when the
	// provider is shorter than the shared bucket thinks (someone else uses
	// the key too), never in step with it: requests in flight when an
	// answer was written are not counted against it.
	mirrorFrom time.Time // send time of the freshest answer with remaining
	mirrorAt   time.Time // when mirrorLeft was brought up to date
	mirrorLeft float64

	// AIMD state of the pacing bucket's capacity.
	burst   int64     // 0 = no answer from the key yet
	credit  int       // answered requests that emptied the bucket since the last step
	shrunk  time.Time // last halving; 429s for requests sent before it do not halve again
	failed  int64     // the burst that last met a 429: growing back to it is slower
	shrinks int64
}

// perMinute is the rate to pace to: the lower of the configured limit and
// the provider's, either alone when the other is unknown; 0 = not paced.
func (d *dim) perMinute() int64 {
	switch {
	case d.configured > 0 && d.limit > 0:
		return min(d.configured, d.limit)
	case d.configured > 0:
		return d.configured
	}
	return d.limit
}

// providerBurst is the provider's real burst as its headers show it; 0 when
// they never did.
func (d *dim) providerBurst() int64 {
	var b int64
	for _, v := range d.bursts {
		b = max(b, v)
	}
	return b
}

// ceiling is the largest burst the pacing bucket may grow to.
func (d *dim) ceiling() int64 {
	pm := d.perMinute()
	oneSecond := max(1, pm/60)
	pb := d.providerBurst()
	if pb == 0 {
		return oneSecond
	}
	slack := max(1, int64(math.Ceil(float64(d.limit)/60*pacingSlack.Seconds())))
	return max(1, min(pb, pm)-slack)
}

// capacity is the pacing bucket's capacity now; initial is what it is before
// the provider's first answer.
func (d *dim) capacity(initial int64) int64 {
	if d.burst == 0 {
		return min(initial, d.ceiling())
	}
	return min(d.burst, d.ceiling())
}

// learn reads the dimension's headers from an answer to a request sent at
// sent that arrived at now. It reports whether they were there, and whether
// the provider's limit is new or changed.
func (d *dim) learn(h http.Header, names dimHeaders, sent, now time.Time) (found, changed bool) {
	limit, okL := headerInt(h, names.limit)
	remaining, okR := headerInt(h, names.remaining)
	reset, okT := headerReset(h, names.reset)
	if !okL && !okR && !okT {
		return false, false
	}
	if okL && limit > 0 && limit != d.limit {
		d.limit, changed = limit, true
	}
	d.seen = now
	if okR && !sent.Before(d.mirrorFrom) {
		// The freshest answer so far (answers may arrive out of order).
		// The provider decided after we sent, so counting its refill from
		// the send time errs on the side of sending.
		d.remaining = remaining
		d.mirrorFrom, d.mirrorAt, d.mirrorLeft = sent, sent, float64(remaining)
		if okT {
			d.fullAt = sent.Add(reset)
		}
	}
	if okR && okT {
		if d.limit > 0 {
			est := float64(remaining) + reset.Seconds()*float64(d.limit)/60
			// est lies in (burst-1, burst] for a bucket-shaped limit, plus
			// the header's millisecond rounding: ceil of a little less
			// recovers burst most of the time, and the maximum over recent
			// answers does the rest.
			b := int64(math.Ceil(min(est, float64(d.limit)) - 0.1))
			d.bursts[d.next] = max(1, b)
			d.next = (d.next + 1) % burstSamples
		}
	}
	return true, changed
}

// started sets the burst on the key's first answer: one second's worth or
// the ceiling, whichever is lower. A provider whose headers describe a
// minute-long bucket may still enforce it per second (OpenAI says its
// limits may be "quantized"), so a larger burst is earned by growing.
func (d *dim) started() {
	if pm := d.perMinute(); d.burst == 0 && pm > 0 {
		d.burst = min(max(1, pm/60), d.ceiling())
	}
}

// shrink halves the burst after a 429 for a request sent at sent, unless
// the burst was halved since that request was sent, or the dimension is not
// paced. It reports whether it shrank.
func (d *dim) shrink(sent, now time.Time) bool {
	d.started()
	if d.burst == 0 || sent.Before(d.shrunk) {
		return false
	}
	d.failed = min(d.burst, d.ceiling())
	d.burst = max(1, d.failed/2)
	d.credit = 0
	d.shrunk = now
	d.shrinks++
	return true
}

// grow counts an answered request that found the bucket empty (it was
// admitted with less than its own weight left): every growAfter of them
// grow the burst by a step, up to the ceiling. Requests sent before the last
// halving do not count: they say nothing about the smaller burst.
func (d *dim) grow(sent time.Time) {
	if d.burst == 0 || sent.Before(d.shrunk) {
		return
	}
	c := d.ceiling()
	if d.burst >= c {
		d.burst, d.credit = c, 0
		return
	}
	next := min(c, d.burst+max(1, c/growSteps))
	need := growAfter
	if d.failed > 0 && next >= d.failed {
		need *= probeSlowdown // back where the provider refused: probe with care
	}
	d.credit++
	if d.credit >= need {
		d.credit = 0
		d.burst = next
	}
}

// providerLeft is what the provider's bucket holds at now as this node
// sees it (see mirrorLeft); ok is false when the provider never said.
func (d *dim) providerLeft(now time.Time) (left, perSec float64, ok bool) {
	if d.limit <= 0 || d.mirrorFrom.IsZero() {
		return 0, 0, false
	}
	perSec = float64(d.limit) / 60
	left = d.mirrorLeft + max(0, now.Sub(d.mirrorAt).Seconds())*perSec
	if pb := d.providerBurst(); pb > 0 {
		left = min(left, float64(pb))
	}
	return left, perSec, true
}

// providerWait is how long, from now, until the provider's bucket holds
// need (clamped to its burst): 0 when it does, or when the provider never
// said.
func (d *dim) providerWait(now time.Time, need int64) time.Duration {
	left, perSec, ok := d.providerLeft(now)
	if !ok {
		return 0
	}
	if pb := d.providerBurst(); pb > 0 {
		need = min(need, pb)
	}
	short := float64(need) - left
	if short <= 0 {
		return 0
	}
	return seconds(short / perSec)
}

// spent counts n sent by this node at now against the provider's bucket.
func (d *dim) spent(now time.Time, n int64) {
	if left, _, ok := d.providerLeft(now); ok {
		d.mirrorLeft, d.mirrorAt = left-float64(n), now
	}
}

// limits reports the dimension for the admin pages; initial is the
// capacity before the first answer (see capacity).
func (d *dim) limits(initial int64) Limits {
	l := Limits{PerMinute: d.perMinute(), Limit: d.limit, Remaining: d.remaining, Seen: d.seen,
		ProviderBurst: d.providerBurst(), Shrinks: d.shrinks}
	if !d.seen.IsZero() {
		l.Reset = d.fullAt
	}
	if l.PerMinute > 0 {
		l.Burst = d.capacity(initial)
	}
	return l
}

// header is the first value of h's canonical name (http.Header.Get would
// canonicalise it again, allocating).
func header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// headerInt reads a non-negative whole number header ("1500", or "1500.0"
// from a provider that writes floats).
func headerInt(h http.Header, name string) (int64, bool) {
	v := header(h, name)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, true
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f < math.MaxInt64/2 {
		return int64(f), true
	}
	return 0, false
}

// headerReset reads a reset header: a Go-style duration as OpenAI writes
// it ("1s", "6m0s", "20ms", "2m59.56s") or a number of seconds ("0.5").
// Anything longer than maxResetHeader (a unix time, a daily window) is
// ignored.
func headerReset(h http.Header, name string) (time.Duration, bool) {
	v := header(h, name)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		s, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || !(s >= 0) || s > maxResetHeader.Seconds() {
			return 0, false
		}
		d = seconds(s)
	}
	if d < 0 || d > maxResetHeader {
		return 0, false
	}
	return d, true
}

// Buckets in the limiter. A bucket's rate is perMinute/60 per second in
// units of `unit` requests or tokens, where unit is 1 unless the rate
// would be over maxBucketRate: quota keeps a bucket's refill interval in
// whole nanoseconds, which is exact to 0.5% up to 10 million a second and
// cannot represent more than a billion. A faster limit (tpm 1,000,000,000,000
// is 1.67e10 a second) is counted in units of 10, 100, … so that any limit
// the API accepts is paced, and a request is charged whole units, rounded
// up: at most one unit more than it uses, which at such rates is nothing.
const maxBucketRate = 1e7

// maxTauNanos bounds capacity × interval well under quota's own bound
// (2^61 ns), so no weight the pool charges is ever refused as invalid: a
// request heavier than that (only possible with a tiny limit and a huge
// estimate, and never admitted within any budget) is charged the most the
// bucket represents.
const maxTauNanos = int64(1) << 59

// bucket is one dimension's pacing bucket for one request.
type bucket struct {
	key    string
	params quota.Params
	unit   int64 // requests or tokens per unit charged
	weight int64 // units charged for this request
}

// newBucket shapes a bucket of capacity (in requests or tokens) refilled at
// perMinute, for a request of weight; ok is false when perMinute is 0.
func newBucket(key string, perMinute, capacity, weight int64) (bucket, bool) {
	if perMinute <= 0 {
		return bucket{}, false
	}
	perSec := float64(perMinute) / 60
	unit := int64(1)
	for perSec/float64(unit) > maxBucketRate {
		unit *= 10
	}
	refill := perSec / float64(unit)
	interval := int64(max(1, math.Round(1e9/refill)))
	maxUnits := max(1, maxTauNanos/interval)
	w := min(ceilDiv(max(1, weight), unit), maxUnits)
	c := min(max(ceilDiv(max(1, capacity), unit), w), maxUnits)
	return bucket{key: key, params: quota.Params{Capacity: c, RefillPerSec: refill}, unit: unit, weight: w}, true
}

// units is n requests or tokens in the bucket's units, rounded up (n >= 0).
func (b bucket) units(n int64) int64 { return ceilDiv(max(0, n), b.unit) }

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// sending counts a request of estimate tokens about to go out against the
// provider's bucket as this node sees it.
func (h *keyHealth) sending(now time.Time, estimate int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.req.spent(now, 1)
	h.tok.spent(now, estimate)
}

// learn records what an answer (status, headers) to an attempt sent at
// sent says about the key's limits: the headers update both dimensions; a
// 429 halves the burst of the dimension at fault (tokens when the provider
// shows tokens short and requests left, else requests); a 2xx to a request
// that emptied a bucket counts towards growing it back. It returns the
// dimensions whose stated limit is new or changed, 0 for unchanged, so the
// change can be logged once.
func (h *keyHealth) learn(hdr http.Header, status int, adm admission, sent, now time.Time) (newRPM, newTPM int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hasReq, reqChanged := h.req.learn(hdr, requestHeaders, sent, now)
	hasTok, tokChanged := h.tok.learn(hdr, tokenHeaders, sent, now)
	if reqChanged {
		newRPM = h.req.limit
	}
	if tokChanged {
		newTPM = h.tok.limit
	}
	h.req.started()
	h.tok.started()
	switch {
	case status == http.StatusTooManyRequests:
		if hasTok && h.tok.remaining < adm.estimate && (!hasReq || h.req.remaining > 0) {
			h.tok.shrink(sent, now)
		} else {
			h.req.shrink(sent, now)
		}
	case status >= 200 && status < 300:
		if adm.reqEmptied {
			h.req.grow(sent)
		}
		if adm.tokEmptied {
			h.tok.grow(sent)
		}
	}
	return newRPM, newTPM
}
