package quota

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the shared Limiter: bucket state lives in Redis, so every gateway
// instance pointed at the same Redis enforces one limit together.
//
// Each Allow or AllowBoth is one EVALSHA of one Lua script: one round trip,
// atomic on the server, with the time read by the script from the Redis
// server's clock (TIME) so that gateway clocks never matter. Adjust is one
// EVALSHA of a second script. go-redis falls back to EVAL when the server has
// not cached a script yet (after a restart or SCRIPT FLUSH), which costs one
// extra round trip once.
//
// # Keys
//
// A bucket named key is stored at prefix + "{" + head + "}" + tail, where head
// is key up to its first '|' and tail is the rest, '|' included:
//
//	"tok:42"     -> prefix + "{tok:42}"
//	"tok:42|tpm" -> prefix + "{tok:42}|tpm"
//
// The braces are a Redis Cluster hash tag, so every bucket of one token lands
// in the same slot and AllowBoth's script may touch both keys on a cluster.
// Callers therefore name a token's buckets "<token key>" and
// "<token key>|<bucket name>". (An empty head is written as "{|}", which no
// non-empty head can produce, because a Cluster hash tag must not be empty.)
// Each key expires when its bucket would be full again (plus a second), so idle
// tokens cost no memory; a missing key is a full bucket.
//
// # Time
//
// A key holds its TAT as a decimal string of unix nanoseconds, the same int64
// the in-process Memory keeps. Lua numbers are doubles, exact only up to 2^53,
// while a unix nanosecond time is about 1.8e18, and working in microseconds
// would not do either: refill intervals are whole nanoseconds (333333ns at
// 3000/s), and rounding them would make Redis and Memory disagree. So the
// scripts split every time into whole seconds and nanoseconds (each far below
// 2^53) and add, subtract and compare the pairs exactly, over the whole range
// newShape accepts (burst windows up to 2^61ns). The script returns the time it
// used and the TATs it read; the Decision is then computed in Go by gcra()
// itself, so Redis and Memory share the arithmetic to the nanosecond, and a
// script that disagreed with gcra() would surface as an error rather than a
// wrong answer.
//
// Requires Redis 5 or later (scripts that read TIME and then write).
type Redis struct {
	client redis.UniversalClient
	prefix string
	now    func() time.Time // nil: the Redis server's clock
	margin int64            // milliseconds a key outlives its bucket's refill
	server serverClock      // how the server's clock stands to ours
	gives  *givesBack       // what Prefetch gives back (see refund)
}

var _ Limiter = (*Redis)(nil)

// RedisOption configures NewRedis.
type RedisOption func(*Redis)

// WithRedisClock makes the scripts use now instead of the Redis server's clock.
// It exists for tests, which cannot move the server's clock; production leaves
// it out, so that every instance shares the server's one notion of time.
// Because an injected clock need not keep pace with real time, keys then
// expire an hour later than that clock says they could.
func WithRedisClock(now func() time.Time) RedisOption {
	return func(r *Redis) { r.now, r.margin = now, injectedClockExpiryMargin }
}

const (
	// redisExpiryMargin keeps a key a little longer than its bucket needs to
	// refill, so that small clock differences between a primary and its
	// replica cannot expire a TAT that still matters.
	redisExpiryMargin         = 1000      // milliseconds
	injectedClockExpiryMargin = 3_600_000 // milliseconds
)

// NewRedis returns a Limiter keeping its buckets in Redis under prefix (for
// example "sluice:quota:"). client may be a single node, a failover client or
// a cluster.
//
// The caller owns client. Calls honour ctx deadlines only if the client was
// created with ContextTimeoutEnabled; set it (and short dial, read and write
// timeouts) so that Degrading can bound each call. NewRedis panics if prefix
// contains '{' or '}', which would move the hash tag out of the bucket key.
func NewRedis(client redis.UniversalClient, prefix string, opts ...RedisOption) *Redis {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("quota: redis key prefix %q must not contain '{' or '}'", prefix))
	}
	r := &Redis{client: client, prefix: prefix, margin: redisExpiryMargin, gives: newGivesBack()}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Allow spends weight tokens from key's bucket if they are all available, in
// one round trip. Invalid params are reported before anything is sent.
func (r *Redis) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	s, err := newShape(p, weight)
	if err != nil {
		return Decision{}, err
	}
	rk := r.key(key)
	args := make([]any, 0, 9)
	args = r.appendNow(ctx, args)
	args = appendCharge(args, s, weight)
	sent := time.Now()
	reply, err := allowScript.Run(ctx, r.client, []string{rk}, args...).StringSlice()
	if err != nil {
		return Decision{}, fmt.Errorf("quota: redis allow: %w", err)
	}
	vals, err := r.parseAllow(reply, 3, sent)
	if err != nil {
		return Decision{}, err
	}
	now, tat, charged := vals[0], vals[1], vals[2] == 1
	d, _ := gcra(tat, now, s, weight)
	if d.Allowed != charged {
		return Decision{}, fmt.Errorf("quota: redis allow: script and gcra disagree (now %d, tat %d)", now, tat)
	}
	return d, nil
}

// AllowBoth charges a and b in one script run, so the pair is atomic: both are
// charged or neither is, and no other request sees one charged without the
// other. The decisions are what Memory.AllowBoth reports in the same state.
// The two keys must share a hash tag on Redis Cluster (see Keys above).
func (r *Redis) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	sa, sb, err := pairShapes(a, b)
	if err != nil {
		return Decision{}, Decision{}, err
	}
	args := make([]any, 0, 13)
	args = r.appendNow(ctx, args)
	args = appendCharge(args, sa, a.Weight)
	args = appendCharge(args, sb, b.Weight)
	keys := []string{r.key(a.Key), r.key(b.Key)}
	sent := time.Now()
	reply, err := allowScript.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return Decision{}, Decision{}, fmt.Errorf("quota: redis allow both: %w", err)
	}
	vals, err := r.parseAllow(reply, 4, sent)
	if err != nil {
		return Decision{}, Decision{}, err
	}
	now, tatA, tatB, charged := vals[0], vals[1], vals[2], vals[3] == 1
	da, db, ok := decideBoth(now, tatA, tatB, a.Key == b.Key, sa, sb, a.Weight, b.Weight)
	if ok != charged {
		return Decision{}, Decision{}, fmt.Errorf("quota: redis allow both: script and gcra disagree (now %d, tats %d %d)", now, tatA, tatB)
	}
	return da, db, nil
}

// AllowAll charges every bucket of cs in one script run, all or none, as
// AllowBoth does two; the decisions are decideAll's, which Memory.AllowAll
// reports in the same state. The keys must share a hash tag on Redis
// Cluster (see Keys above).
func (r *Redis) AllowAll(ctx context.Context, cs []Charge) ([]Decision, error) {
	ss, err := chargeShapes(cs)
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 5+4*len(cs))
	args = r.appendNow(ctx, args)
	keys := make([]string, len(cs))
	for i, c := range cs {
		args = appendCharge(args, ss[i], c.Weight)
		keys[i] = r.key(c.Key)
	}
	sent := time.Now()
	reply, err := allowScript.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("quota: redis allow all: %w", err)
	}
	vals, err := r.parseAllow(reply, 2+len(cs), sent)
	if err != nil {
		return nil, err
	}
	ds, ok := decideAll(vals[0], vals[1:1+len(cs)], ss, cs)
	if ok != (vals[1+len(cs)] == 1) {
		return nil, fmt.Errorf("quota: redis allow all: script and gcra disagree (now %d, tats %v)", vals[0], vals[1:1+len(cs)])
	}
	return ds, nil
}

// decideBoth is AllowBoth's decision from the state before the call: a is
// charged first and b second (seeing a's charge when they are the same
// bucket); if either rejects, both are reported uncharged, as Memory does. It
// reports whether both were charged. It mirrors Memory.AllowBoth step by step
// so that the two backends answer alike, which TestRedisMatchesMemory checks.
func decideBoth(now, tatA, tatB int64, sameKey bool, sa, sb shape, wa, wb int64) (Decision, Decision, bool) {
	da, nextA := gcra(tatA, now, sa, wa)
	if !da.Allowed {
		db, _ := gcra(tatB, now, sb, wb)
		return da, uncharged(db, sb, wb), false
	}
	if sameKey {
		tatB = nextA
	}
	db, _ := gcra(tatB, now, sb, wb)
	if !db.Allowed {
		return uncharged(da, sa, wa), db, false
	}
	return da, db, true
}

// maxAdjustShift bounds delta*interval in Adjust so that it cannot overflow.
// The bound changes nothing: adjust() clamps a debt at now + 2*tau (2*tau <=
// 2^62) and a refund at now, and a stored TAT is never more than 2^62 ahead.
const maxAdjustShift = int64(1) << 62

// Adjust settles key's bucket by delta tokens (see Limiter), in one round trip;
// a bucket refunded to full is deleted.
func (r *Redis) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	s, err := shapeForAdjust(p)
	if err != nil || delta == 0 {
		return err
	}
	reply, err := adjustScript.Run(ctx, r.client, []string{r.key(key)}, r.adjustArgs(ctx, s, delta)...).Text()
	if err != nil {
		return fmt.Errorf("quota: redis adjust: %w", err)
	}
	if reply == lateReply {
		return fmt.Errorf("quota: redis adjust: %w", ErrLate)
	}
	return nil
}

// adjustArgs are the adjust script's arguments for delta tokens.
func (r *Redis) adjustArgs(ctx context.Context, s shape, delta int64) []any {
	var shift int64
	switch limit := maxAdjustShift / s.interval; {
	case delta > limit:
		shift = maxAdjustShift
	case delta < -limit:
		shift = -maxAdjustShift
	default:
		shift = delta * s.interval
	}
	args := make([]any, 0, 10)
	args = r.appendNow(ctx, args)
	args = appendNanos(args, shift)
	args = appendNanos(args, 2*s.tau)
	return append(args, delta > 0)
}

// key is the Redis key of the bucket named k (see Keys in the type's doc).
func (r *Redis) key(k string) string {
	head, tail := k, ""
	if i := strings.IndexByte(k, '|'); i >= 0 {
		head, tail = k[:i], k[i:]
	}
	if head == "" {
		head = "|"
	}
	return r.prefix + "{" + head + "}" + tail
}

// appendNow adds the arguments every script starts with: the clock (empty to
// use the server's TIME, or the injected clock as seconds and nanoseconds),
// the expiry margin in milliseconds, and the deadline after which the call
// must change nothing (see ErrLate; empty for none).
func (r *Redis) appendNow(ctx context.Context, args []any) []any {
	if r.now != nil {
		// An injected clock does not move while a call waits: no deadline.
		return append(appendNanos(args, r.now().UnixNano()), r.margin, "", "")
	}
	args = append(args, "", "", r.margin)
	if deadline, ok := r.server.deadline(ctx); ok {
		return appendNanos(args, deadline)
	}
	return append(args, "", "")
}

// appendCharge adds one bucket's arguments: the cost of the request
// (weight*interval) and the burst tolerance tau, as nanosecond pairs.
func appendCharge(args []any, s shape, weight int64) []any {
	args = appendNanos(args, weight*s.interval)
	return appendNanos(args, s.tau)
}

// appendNanos adds ns as whole seconds (floored, so possibly negative) and
// nanoseconds in [0, 1e9): the representation the scripts compute with.
func appendNanos(args []any, ns int64) []any {
	sec, nsec := splitNanos(ns)
	return append(args, sec, nsec)
}

func splitNanos(ns int64) (sec, nsec int64) {
	sec, nsec = ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec
}

// parseAllow reads the allow script's reply (see parseReply), or its answer
// to a call that came too late, and learns the server's clock from it.
func (r *Redis) parseAllow(reply []string, n int, sent time.Time) ([]int64, error) {
	if len(reply) == 2 && reply[1] == lateReply {
		return nil, fmt.Errorf("quota: redis allow: %w", ErrLate)
	}
	vals, err := parseReply(reply, n)
	if err == nil && r.now == nil {
		r.server.observe(sent, time.Now(), vals[0])
	}
	return vals, err
}

// parseReply reads the allow script's reply: the time it used, the TAT of
// each key as it found it, and whether it charged.
func parseReply(reply []string, n int) ([]int64, error) {
	if len(reply) != n {
		return nil, fmt.Errorf("quota: redis: script replied %q, want %d values", reply, n)
	}
	vals := make([]int64, n)
	for i, s := range reply {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("quota: redis: script replied %q: %w", reply, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// redisTimeLua is the start of both scripts. A time or duration is a pair
// (s, n): whole seconds, possibly negative, and nanoseconds in [0, 1e9). Every
// value stays far below 2^53, so the double arithmetic is exact.
const redisTimeLua = `
local E = 1000000000

-- norm carries n back into [0, E) after one addition or subtraction.
local function norm(s, n)
  if n >= E then return s + 1, n - E end
  if n < 0 then return s - 1, n + E end
  return s, n
end

local function less(as, an, bs, bn)
  return as < bs or (as == bs and an < bn)
end

-- clock is the injected time if the caller sent one, else the server's.
local function clock(s, n)
  if s ~= '' then return tonumber(s), tonumber(n) end
  local t = redis.call('TIME')
  return tonumber(t[1]), tonumber(t[2]) * 1000
end

-- load reads a TAT (unix nanoseconds, decimal) as a pair, and the raw string;
-- a missing key is TAT 0, a full bucket.
local function load(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0, '0' end
  local len = #v
  if len <= 9 then return 0, tonumber(v), v end
  return tonumber(string.sub(v, 1, len - 9)), tonumber(string.sub(v, len - 8)), v
end

-- since is max(tat, now) - now.
local function since(ts, tn, ns, nn)
  if less(ts, tn, ns, nn) then return 0, 0 end
  return norm(ts - ns, tn - nn)
end

local function fmt(s, n)
  return string.format('%d%09d', s, n)
end

-- late reports whether the call reached the server after the deadline its
-- caller sent (ARGV[4], ARGV[5], in server time): it has given up waiting
-- and decided without Redis, so the call must change nothing.
local function late(ns, nn)
  if ARGV[4] == '' then return false end
  return less(tonumber(ARGV[4]), tonumber(ARGV[5]), ns, nn)
end

-- store sets the TAT to now + (os, on) > now, expiring margin milliseconds
-- after the bucket is full again.
local function store(key, ns, nn, os, on)
  local ts, tn = norm(ns + os, nn + on)
  local ms = os * 1000 + math.ceil(on / 1000000) + tonumber(ARGV[3])
  redis.call('SET', key, fmt(ts, tn), 'PX', string.format('%d', ms))
end
`

// allowScript runs GCRA on one or more buckets. KEYS: the buckets. ARGV: now
// (two empty strings for the server's TIME), the expiry margin and the
// deadline (two empty strings for none), then per key the cost
// (weight*interval) and tau. It charges every key or none, and replies with
// the time used, the TATs read and 1 if it charged, all as decimal strings;
// or, past the deadline, with the time and "late", having changed nothing.
var allowScript = redis.NewScript(redisTimeLua + `
local ns, nn = clock(ARGV[1], ARGV[2])
if late(ns, nn) then return {fmt(ns, nn), 'late'} end
local raw, xs, xn = {}, {}, {}
local ok = 1
for i = 1, #KEYS do
  local a = 5 + 4 * (i - 1)
  local cs, cn = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local taus, taun = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local ts, tn
  ts, tn, raw[i] = load(KEYS[i])
  local bs, bn = since(ts, tn, ns, nn)
  if i == 2 and ok == 1 and KEYS[2] == KEYS[1] then
    -- One bucket charged twice: the second charge sees the first.
    bs, bn = xs[1], xn[1]
  end
  -- next - now = max(tat, now) - now + cost; admitted iff it is within tau.
  xs[i], xn[i] = norm(bs + cs, bn + cn)
  if less(taus, taun, xs[i], xn[i]) then ok = 0 end
end
if ok == 1 then
  for i = 1, #KEYS do store(KEYS[i], ns, nn, xs[i], xn[i]) end
end
local reply = {fmt(ns, nn)}
for i = 1, #KEYS do reply[i + 1] = raw[i] end
reply[#KEYS + 2] = tostring(ok)
return reply
`)

// adjustScript moves one TAT by a signed shift. KEYS: the bucket. ARGV: now,
// margin and deadline (as for allowScript), the shift (delta*interval), the
// debt bound 2*tau, and 1 for a debt or 0 for a refund. A bucket refunded to
// full is deleted. It replies 1, or "late" having changed nothing.
var adjustScript = redis.NewScript(redisTimeLua + adjustLua)

const adjustLua = `
local ns, nn = clock(ARGV[1], ARGV[2])
if late(ns, nn) then return 'late' end
local ts, tn = load(KEYS[1])
local bs, bn = since(ts, tn, ns, nn)
local xs, xn = norm(bs + tonumber(ARGV[6]), bn + tonumber(ARGV[7]))
if ARGV[10] == '1' then
  local ls, ln = tonumber(ARGV[8]), tonumber(ARGV[9])
  if less(ls, ln, xs, xn) then xs, xn = ls, ln end
elseif xs < 0 then
  xs, xn = 0, 0
end
if xs == 0 and xn == 0 then
  redis.call('DEL', KEYS[1])
else
  store(KEYS[1], ns, nn, xs, xn)
end
return '1'
`
