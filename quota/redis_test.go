package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests against a real Redis run when TEST_REDIS_URL is set (CI sets it) and
// skip otherwise. Every test works under its own random key prefix, so
// parallel runs against one Redis never share a bucket.

// rlOptions returns client options for TEST_REDIS_URL, or skips the test.
func rlOptions(t testing.TB) *redis.Options {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs a real Redis (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	// What production must set too, so that ctx deadlines bound each call.
	opt.ContextTimeoutEnabled = true
	return opt
}

// rlClient connects with opt, adds hooks, checks the server answers and
// closes the client after the test.
func rlClient(t testing.TB, opt *redis.Options, hooks ...redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("TEST_REDIS_URL %s: %v", opt.Addr, err)
	}
	for _, h := range hooks {
		c.AddHook(h)
	}
	return c
}

// rlPrefix returns a key prefix that no other test or test run uses, and
// deletes its keys (through c) when the test ends.
func rlPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "sluicetest:quota:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var keys []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning up %s*: %v", prefix, err)
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
				t.Errorf("cleaning up %s*: %v", prefix, err)
				return
			}
			keys = keys[n:]
		}
	})
	return prefix
}

// rlSetup is the usual start of a test: one client, a fresh prefix, and a
// Redis limiter on the fake clock clk (nil: the server's clock).
func rlSetup(t testing.TB, clk *fakeClock, hooks ...redis.Hook) (*Redis, *redis.Client) {
	t.Helper()
	c := rlClient(t, rlOptions(t), hooks...)
	var opts []RedisOption
	if clk != nil {
		opts = append(opts, WithRedisClock(clk.Now))
	}
	return NewRedis(c, rlPrefix(t, c), opts...), c
}

// rlCounter is a go-redis hook that counts the commands a client sends, by
// name: the round trips a limiter costs.
type rlCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newRLCounter() *rlCounter { return &rlCounter{n: make(map[string]int)} }

func (c *rlCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rlCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *rlCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *rlCounter) add(cmd redis.Cmder) {
	c.mu.Lock()
	c.n[cmd.Name()]++
	c.mu.Unlock()
}

// counts returns the counts so far and starts again from zero.
func (c *rlCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = make(map[string]int)
	return n
}

func rlTotal(counts map[string]int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// rlAllow is allow() for any Limiter.
func rlAllow(t testing.TB, l Limiter, key string, p Params, weight int64) Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), key, p, weight)
	if err != nil {
		t.Fatalf("Allow(%q, %+v, %d): %v", key, p, weight, err)
	}
	return d
}

// rlDrain is drain() for any Limiter.
func rlDrain(t testing.TB, l Limiter, key string, p Params) int64 {
	t.Helper()
	var n int64
	for rlAllow(t, l, key, p, 1).Allowed {
		n++
		if n > p.Capacity {
			t.Fatalf("admitted %d at one instant, more than capacity %d", n, p.Capacity)
		}
	}
	return n
}

// redisHashTag is the part of a key Redis Cluster hashes.
func redisHashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestRedisKeys(t *testing.T) {
	r := NewRedis(nil, "sluice:quota:")
	tests := []struct {
		key, other string // two buckets of one token
		want       string // the Redis key of key
	}{
		{"tok:42", "tok:42|tpm", "sluice:quota:{tok:42}"},
		{"tok:42|tpm", "tok:42", "sluice:quota:{tok:42}|tpm"},
		{"tok:42|a|b", "tok:42", "sluice:quota:{tok:42}|a|b"},
		{"", "|tpm", "sluice:quota:{|}"},
		{"|tpm", "", "sluice:quota:{|}|tpm"},
		{"a}b", "a}b|tpm", "sluice:quota:{a}b}"},
		{"{x}", "{x}|tpm", "sluice:quota:{{x}}"},
	}
	seen := make(map[string]string)
	for _, tt := range tests {
		got := r.key(tt.key)
		if got != tt.want {
			t.Errorf("key(%q) = %q, want %q", tt.key, got, tt.want)
		}
		if a, b := redisHashTag(got), redisHashTag(r.key(tt.other)); a != b || a == got {
			t.Errorf("%q and %q hash as %q and %q, want one shared hash tag", tt.key, tt.other, a, b)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("%q and %q both map to %q", prev, tt.key, got)
		}
		seen[got] = tt.key
	}

	for _, prefix := range []string{"a{", "}"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewRedis with prefix %q did not panic", prefix)
				}
			}()
			NewRedis(nil, prefix)
		}()
	}
}

func TestSplitNanos(t *testing.T) {
	tests := []struct{ ns, sec, nsec int64 }{
		{0, 0, 0},
		{1, 0, 1},
		{999_999_999, 0, 999_999_999},
		{1_000_000_000, 1, 0},
		{-1, -1, 999_999_999},
		{-1_000_000_000, -1, 0},
		{-1_500_000_000, -2, 500_000_000},
		{math.MaxInt64, 9_223_372_036, 854_775_807},
		{math.MinInt64, -9_223_372_037, 145_224_192},
	}
	for _, tt := range tests {
		if sec, nsec := splitNanos(tt.ns); sec != tt.sec || nsec != tt.nsec {
			t.Errorf("splitNanos(%d) = %d, %d; want %d, %d", tt.ns, sec, nsec, tt.sec, tt.nsec)
		}
	}
}

func TestRedisFreeTierBurst(t *testing.T) {
	clk := newFakeClock()
	r, _ := rlSetup(t, clk)
	for i := int64(1); i <= 30; i++ {
		d := rlAllow(t, r, "tok:1", free, 1)
		want := Decision{Allowed: true, Limit: 30, Remaining: 30 - i, ResetAfter: time.Duration(i) * 2 * time.Second}
		if d != want {
			t.Fatalf("request %d: got %+v, want %+v", i, d, want)
		}
	}
	d := rlAllow(t, r, "tok:1", free, 1)
	want := Decision{Allowed: false, Limit: 30, Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}
	if d != want {
		t.Fatalf("31st request: got %+v, want %+v", d, want)
	}
	clk.Advance(2 * time.Second)
	if n := rlDrain(t, r, "tok:1", free); n != 1 {
		t.Fatalf("after 2s admitted %d, want exactly 1", n)
	}
	clk.Advance(1999 * time.Millisecond)
	if d := rlAllow(t, r, "tok:1", free, 1); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("1ms early: got %+v, want rejected with RetryAfter 1ms", d)
	}
}

func TestRedisPremiumBurst(t *testing.T) {
	clk := newFakeClock()
	r, _ := rlSetup(t, clk)
	if n := rlDrain(t, r, "tok:1", premium); n != 200 {
		t.Fatalf("burst admitted %d, want 200", n)
	}
	d := rlAllow(t, r, "tok:1", premium, 1)
	if d.Allowed || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 40*time.Second {
		t.Fatalf("after burst got %+v, want rejected, RetryAfter 200ms, ResetAfter 40s", d)
	}
	clk.Advance(time.Second)
	if n := rlDrain(t, r, "tok:1", premium); n != 5 {
		t.Fatalf("after 1s admitted %d, want 5", n)
	}
}

// TestRedisServerTime uses the Redis server's clock, as production does: the
// burst is exact, and the stored TAT is the server's time plus the burst.
func TestRedisServerTime(t *testing.T) {
	r, c := rlSetup(t, nil)
	start := time.Now()
	if n := rlDrain(t, r, "tok:1", free); n != 30 {
		t.Fatalf("burst admitted %d, want 30", n)
	}
	d := rlAllow(t, r, "tok:1", free, 1)
	elapsed := time.Since(start)
	if d.Allowed || d.RetryAfter <= 2*time.Second-elapsed-time.Millisecond || d.RetryAfter > 2*time.Second {
		t.Fatalf("after burst got %+v, want rejected with RetryAfter in (2s-%v, 2s]", d, elapsed)
	}
	if d.ResetAfter <= 60*time.Second-elapsed-time.Millisecond || d.ResetAfter > 60*time.Second {
		t.Fatalf("after burst got %+v, want ResetAfter in (60s-%v, 60s]", d, elapsed)
	}
	raw, err := c.Get(context.Background(), r.key("tok:1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		t.Fatalf("stored TAT %q: %v", raw, err)
	}
	// The server runs on this machine in CI; allow for some clock skew.
	if got := time.Unix(0, tat).Sub(start.Add(time.Minute)); got < -5*time.Second || got > 5*time.Second {
		t.Fatalf("stored TAT %v is %v from now+60s", time.Unix(0, tat), got)
	}
}

// TestRedisSequences checks every field of every decision for the cases the
// Memory tests walk through, on Redis and on Memory side by side.
func TestRedisSequences(t *testing.T) {
	rlOptions(t) // skip the whole table without TEST_REDIS_URL
	type step struct {
		advance time.Duration
		p       Params
		weight  int64
		want    Decision
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"weights consume their weight", []step{
			{0, free, 5, Decision{Allowed: true, Limit: 30, Remaining: 25, ResetAfter: 10 * time.Second}},
			{0, free, 1, Decision{Allowed: true, Limit: 30, Remaining: 24, ResetAfter: 12 * time.Second}},
			{0, free, 24, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 60 * time.Second}},
		}},
		{"rejected weight consumes nothing", []step{
			{0, free, 28, Decision{Allowed: true, Limit: 30, Remaining: 2, ResetAfter: 56 * time.Second}},
			{0, free, 5, Decision{Limit: 30, Remaining: 2, RetryAfter: 6 * time.Second, ResetAfter: 56 * time.Second}},
			{0, free, 2, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 60 * time.Second}},
		}},
		{"rejections do not push back the next allowed time", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}},
			{time.Second, free, 1, Decision{Limit: 30, RetryAfter: time.Second, ResetAfter: 59 * time.Second}},
			{time.Second, free, 1, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
		}},
		{"RetryAfter waits for the whole weight", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{3 * time.Second, free, 3, Decision{Limit: 30, Remaining: 1, RetryAfter: 3 * time.Second, ResetAfter: 57 * time.Second}},
			{3 * time.Second, free, 3, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
		}},
		{"partial token is not counted", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{1500 * time.Millisecond, free, 1, Decision{Limit: 30, RetryAfter: 500 * time.Millisecond, ResetAfter: 58500 * time.Millisecond}},
			{time.Nanosecond, free, 1, Decision{Limit: 30, RetryAfter: 500*time.Millisecond - 1, ResetAfter: 58500*time.Millisecond - 1}},
		}},
		{"idle time is not banked beyond capacity", []step{
			{0, free, 1, Decision{Allowed: true, Limit: 30, Remaining: 29, ResetAfter: 2 * time.Second}},
			{time.Hour, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}},
		}},
		{"lowered capacity applies on the next call", []step{
			{0, Params{Capacity: 60, RefillPerSec: 0.5}, 40, Decision{Allowed: true, Limit: 60, Remaining: 20, ResetAfter: 80 * time.Second}},
			{0, free, 1, Decision{Limit: 30, Remaining: 0, RetryAfter: 22 * time.Second, ResetAfter: 80 * time.Second}},
		}},
		{"refill change keeps the time owed", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, Params{Capacity: 30, RefillPerSec: 1.0 / 3}, 10, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 90 * time.Second}},
		}},
		// 3000/s is an interval of 333333ns: Redis must not round it to µs.
		{"nanosecond intervals", []step{
			{0, Params{Capacity: 2, RefillPerSec: 3000}, 2, Decision{Allowed: true, Limit: 2, ResetAfter: 666666}},
			{333332, Params{Capacity: 2, RefillPerSec: 3000}, 1, Decision{Limit: 2, RetryAfter: 1, ResetAfter: 333334}},
			{1, Params{Capacity: 2, RefillPerSec: 3000}, 1, Decision{Allowed: true, Limit: 2, ResetAfter: 666666}},
		}},
		// A burst window of 2e18ns: TATs far beyond 2^53, still exact.
		{"burst window beyond 2^53 ns", []step{
			{0, Params{Capacity: 2_000_000_000, RefillPerSec: 1}, 1_999_999_999, Decision{Allowed: true, Limit: 2_000_000_000, Remaining: 1, ResetAfter: 1_999_999_999 * time.Second}},
			{time.Nanosecond, Params{Capacity: 2_000_000_000, RefillPerSec: 1}, 2, Decision{Limit: 2_000_000_000, Remaining: 1, RetryAfter: time.Second - 1, ResetAfter: 1_999_999_999*time.Second - 1}},
			{time.Nanosecond, Params{Capacity: 2_000_000_000, RefillPerSec: 1}, 1, Decision{Allowed: true, Limit: 2_000_000_000, Remaining: 0, ResetAfter: 2_000_000_000*time.Second - 2}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, _ := rlSetup(t, clk)
			m := NewMemory(clk.Now)
			for i, s := range tt.steps {
				clk.Advance(s.advance)
				for _, l := range []Limiter{m, r} {
					if got := rlAllow(t, l, "tok:1", s.p, s.weight); got != s.want {
						t.Fatalf("%T step %d (weight %d, %+v):\n got  %+v\n want %+v", l, i, s.weight, s.p, got, s.want)
					}
				}
			}
		})
	}
}

// TestRedisMatchesMemory drives Redis and Memory through the same random
// calls on a shared fake clock and requires identical answers: the two
// backends share the arithmetic to the nanosecond.
func TestRedisMatchesMemory(t *testing.T) {
	clk := newFakeClock()
	r, _ := rlSetup(t, clk)
	m := NewMemory(clk.Now)
	ctx := context.Background()

	params := []Params{
		free,
		premium,
		{Capacity: 30, RefillPerSec: 0.3},
		{Capacity: 10, RefillPerSec: 3000},
		{Capacity: 7, RefillPerSec: 1e9 / 7.5},
		{Capacity: 1, RefillPerSec: 1e-3},
		{Capacity: 100_000, RefillPerSec: 100_000.0 / 60},
		{Capacity: 2_000_000_000, RefillPerSec: 1}, // tau 2e18ns
	}
	keys := []string{"tok:1", "tok:1|tpm", "tok:2", "tok:2|tpm"}
	advances := []time.Duration{0, 0, 1, 7, 333_333, time.Millisecond, 100 * time.Millisecond, time.Second, 7 * time.Second, time.Minute}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := mrand.New(mrand.NewPCG(seed, 1))
	pick := func() (string, Params, int64) {
		p := params[rng.IntN(len(params))]
		w := 1 + rng.Int64N(min(p.Capacity, 40))
		if rng.IntN(10) == 0 {
			w = p.Capacity
		}
		return keys[rng.IntN(len(keys))], p, w
	}
	for i := range 3000 {
		clk.Advance(advances[rng.IntN(len(advances))])
		switch op := rng.IntN(10); {
		case op < 5:
			k, p, w := pick()
			dm, errM := m.Allow(ctx, k, p, w)
			dr, errR := r.Allow(ctx, k, p, w)
			if errM != nil || errR != nil || dm != dr {
				t.Fatalf("call %d Allow(%q, %+v, %d):\n memory %+v %v\n redis  %+v %v", i, k, p, w, dm, errM, dr, errR)
			}
		case op < 7:
			// Three distinct buckets, as a request with a token rate of its
			// own charges on a tier with tokens per minute.
			var cs []Charge
			for _, at := range rng.Perm(len(keys))[:3] {
				_, p, w := pick()
				cs = append(cs, Charge{keys[at], p, w})
			}
			dm, errM := m.AllowAll(ctx, cs)
			dr, errR := r.AllowAll(ctx, cs)
			if errM != nil || errR != nil || fmt.Sprint(dm) != fmt.Sprint(dr) {
				t.Fatalf("call %d AllowAll(%+v):\n memory %+v %v\n redis  %+v %v", i, cs, dm, errM, dr, errR)
			}
		case op < 8:
			ka, pa, wa := pick()
			kb, pb, wb := pick()
			a, b := Charge{ka, pa, wa}, Charge{kb, pb, wb}
			ma, mb, errM := m.AllowBoth(ctx, a, b)
			ra, rb, errR := r.AllowBoth(ctx, a, b)
			if errM != nil || errR != nil || ma != ra || mb != rb {
				t.Fatalf("call %d AllowBoth(%+v, %+v):\n memory %+v %+v %v\n redis  %+v %+v %v", i, a, b, ma, mb, errM, ra, rb, errR)
			}
		default:
			k, p, w := pick()
			// Memory's adjust computes delta*interval in int64; keep it in range.
			delta := min(w, 1000) * int64(1-2*rng.IntN(2))
			errM := m.Adjust(ctx, k, p, delta)
			errR := r.Adjust(ctx, k, p, delta)
			if errM != nil || errR != nil {
				t.Fatalf("call %d Adjust(%q, %+v, %d): memory %v, redis %v", i, k, p, delta, errM, errR)
			}
		}
	}
}

// TestRedisSustainedRate checks that after the initial burst exactly
// RefillPerSec requests per second get through, over long simulated runs.
func TestRedisSustainedRate(t *testing.T) {
	rlOptions(t) // skip the whole table without TEST_REDIS_URL
	tests := []struct {
		name     string
		p        Params
		step     time.Duration
		duration time.Duration
		want     int64 // admitted in [0, duration], burst included
	}{
		{"free", free, 100 * time.Millisecond, 400 * time.Second, 30 + 200},
		{"premium", premium, 50 * time.Millisecond, 200 * time.Second, 200 + 1000},
		{"free auto-tuned", Params{Capacity: 30, RefillPerSec: 0.3}, 500 * time.Millisecond, 1000 * time.Second, 30 + 300},
		{"fast", Params{Capacity: 10, RefillPerSec: 3000}, time.Millisecond, 3 * time.Second, 10 + 9000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, _ := rlSetup(t, clk)
			admitted := rlDrain(t, r, "tok:1", tt.p)
			for elapsed := time.Duration(0); elapsed < tt.duration; elapsed += tt.step {
				clk.Advance(tt.step)
				admitted += rlDrain(t, r, "tok:1", tt.p)
			}
			if admitted < tt.want || admitted > tt.want+1 {
				t.Fatalf("admitted %d over %v, want %d (+1)", admitted, tt.duration, tt.want)
			}
		})
	}
}

func TestRedisInvalidParams(t *testing.T) {
	tests := []struct {
		name   string
		p      Params
		weight int64
		want   error
	}{
		{"zero capacity", Params{Capacity: 0, RefillPerSec: 1}, 1, ErrInvalidParams},
		{"NaN refill", Params{Capacity: 30, RefillPerSec: math.NaN()}, 1, ErrInvalidParams},
		{"refill faster than 1/ns", Params{Capacity: 30, RefillPerSec: 1e10}, 1, ErrInvalidParams},
		{"burst window overflows", Params{Capacity: math.MaxInt64, RefillPerSec: 1}, 1, ErrInvalidParams},
		{"zero weight", free, 0, ErrInvalidParams},
		{"weight above capacity", free, 31, ErrWeightExceedsCapacity},
	}
	counter := newRLCounter()
	r, _ := rlSetup(t, newFakeClock(), counter)
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("tok:%d", i)
			counter.counts()
			d, err := r.Allow(ctx, key, tt.p, tt.weight)
			if !errors.Is(err, tt.want) || d != (Decision{}) {
				t.Fatalf("Allow: got %+v, %v; want zero decision and %v", d, err, tt.want)
			}
			good := Charge{key, free, 1}
			bad := Charge{key + "|tpm", tt.p, tt.weight}
			for _, pair := range [][2]Charge{{good, bad}, {bad, good}} {
				da, db, err := r.AllowBoth(ctx, pair[0], pair[1])
				if !errors.Is(err, tt.want) || da != (Decision{}) || db != (Decision{}) {
					t.Fatalf("AllowBoth: got %+v %+v, %v; want zero decisions and %v", da, db, err, tt.want)
				}
			}
			if tt.weight == 1 {
				if err := r.Adjust(ctx, key, tt.p, 1); !errors.Is(err, tt.want) {
					t.Fatalf("Adjust: got %v, want %v", err, tt.want)
				}
			}
			if n := counter.counts(); len(n) != 0 {
				t.Fatalf("invalid params sent %v to Redis, want nothing", n)
			}
			for _, k := range []string{key, key + "|tpm"} {
				if n := rlDrain(t, r, k, free); n != 30 {
					t.Fatalf("after the errors, %s admitted a burst of %d, want 30", k, n)
				}
			}
		})
	}
}

// TestRedisRejectedConsumesNothing checks that a rejection, by its own bucket
// or by the other bucket of an AllowBoth, leaves every bucket as it was.
func TestRedisRejectedConsumesNothing(t *testing.T) {
	rlOptions(t) // skip the whole table without TEST_REDIS_URL
	tpm := Params{Capacity: 1000, RefillPerSec: 1000.0 / 60}
	reqs := Charge{Key: "tok:1", Params: free, Weight: 1}
	tokens := func(w int64) Charge { return Charge{Key: "tok:1|tpm", Params: tpm, Weight: w} }
	ctx := context.Background()

	tests := []struct {
		name    string
		prepare func(t *testing.T, l Limiter) // leaves one bucket short
		a, b    Charge
		wantA   Decision
		wantB   Decision
	}{
		{
			name:    "rejected by the tokens bucket",
			prepare: func(t *testing.T, l Limiter) { rlAllow(t, l, "tok:1|tpm", tpm, 900) },
			a:       reqs, b: tokens(200),
			wantA: Decision{Limit: 30, Remaining: 30},
			wantB: Decision{Limit: 1000, Remaining: 100, RetryAfter: 6 * time.Second, ResetAfter: 54 * time.Second},
		},
		{
			name:    "rejected by the requests bucket",
			prepare: func(t *testing.T, l Limiter) { rlAllow(t, l, "tok:1", free, 30) },
			a:       reqs, b: tokens(200),
			wantA: Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second},
			wantB: Decision{Limit: 1000, Remaining: 1000},
		},
		{
			name:    "one bucket charged twice",
			prepare: func(t *testing.T, l Limiter) { rlAllow(t, l, "tok:1", free, 20) },
			a:       Charge{"tok:1", free, 5}, b: Charge{"tok:1", free, 6},
			wantA: Decision{Limit: 30, Remaining: 10, ResetAfter: 40 * time.Second},
			wantB: Decision{Limit: 30, Remaining: 5, RetryAfter: 2 * time.Second, ResetAfter: 50 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, c := rlSetup(t, clk)
			m := NewMemory(clk.Now)
			for _, l := range []Limiter{m, r} {
				tt.prepare(t, l)
			}
			before := rlDump(t, c, r, "tok:1", "tok:1|tpm")
			for _, l := range []Limiter{m, r} {
				da, db, err := l.AllowBoth(ctx, tt.a, tt.b)
				if err != nil || da != tt.wantA || db != tt.wantB {
					t.Fatalf("%T AllowBoth:\n got  %+v %+v %v\n want %+v %+v", l, da, db, err, tt.wantA, tt.wantB)
				}
			}
			if after := rlDump(t, c, r, "tok:1", "tok:1|tpm"); after != before {
				t.Fatalf("rejected AllowBoth changed Redis from %v to %v", before, after)
			}
			// The buckets hold what they held: the same as Memory's.
			for _, k := range []struct {
				key string
				p   Params
			}{{"tok:1", free}, {"tok:1|tpm", tpm}} {
				if nm, nr := rlDrain(t, m, k.key, k.p), rlDrain(t, r, k.key, k.p); nm != nr {
					t.Fatalf("%s: memory admitted %d more, redis %d", k.key, nm, nr)
				}
			}
		})
	}
}

// rlDump is the raw stored state of some buckets.
func rlDump(t *testing.T, c *redis.Client, r *Redis, keys ...string) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		v, err := c.Get(context.Background(), r.key(k)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%q ", k, v)
	}
	return b.String()
}

func TestRedisAllowBothChargesBoth(t *testing.T) {
	clk := newFakeClock()
	r, _ := rlSetup(t, clk)
	tpm := Params{Capacity: 100, RefillPerSec: 100.0 / 60}
	ctx := context.Background()
	// The tokens bucket runs out first: 10 requests of 10 tokens.
	for i := range 12 {
		da, db, err := r.AllowBoth(ctx, Charge{"tok:1", free, 1}, Charge{"tok:1|tpm", tpm, 10})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 10; da.Allowed != want || db.Allowed != want {
			t.Fatalf("request %d: got %+v %+v, want both allowed=%v", i, da, db, want)
		}
	}
	if n := rlDrain(t, r, "tok:1", free); n != 20 {
		t.Fatalf("requests bucket has %d left, want 20 (only admitted pairs charged)", n)
	}
}

func TestRedisAdjust(t *testing.T) {
	rlOptions(t) // skip the whole table without TEST_REDIS_URL
	ctx := context.Background()
	tests := []struct {
		name   string
		spend  int64
		delta  int64
		want   Decision // of a weight-1 Allow afterwards
		exists bool     // whether the key remains
	}{
		{"refund", 10, -4, Decision{Allowed: true, Limit: 30, Remaining: 23, ResetAfter: 14 * time.Second}, true},
		{"refund never beyond full", 10, -50, Decision{Allowed: true, Limit: 30, Remaining: 29, ResetAfter: 2 * time.Second}, true},
		{"huge refund", 10, math.MinInt64, Decision{Allowed: true, Limit: 30, Remaining: 29, ResetAfter: 2 * time.Second}, true},
		{"debt", 10, 15, Decision{Allowed: true, Limit: 30, Remaining: 4, ResetAfter: 52 * time.Second}, true},
		{"debt bounded at one bucket below empty", 30, 100, Decision{Limit: 30, RetryAfter: 62 * time.Second, ResetAfter: 120 * time.Second}, true},
		{"huge debt", 0, math.MaxInt64, Decision{Limit: 30, RetryAfter: 62 * time.Second, ResetAfter: 120 * time.Second}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, c := rlSetup(t, clk)
			if tt.spend > 0 {
				rlAllow(t, r, "tok:1", free, tt.spend)
			}
			if err := r.Adjust(ctx, "tok:1", free, tt.delta); err != nil {
				t.Fatal(err)
			}
			if got := rlAllow(t, r, "tok:1", free, 1); got != tt.want {
				t.Fatalf("after Adjust(%d): got %+v, want %+v", tt.delta, got, tt.want)
			}
			if n, err := c.Exists(ctx, r.key("tok:1")).Result(); err != nil || (n == 1) != tt.exists {
				t.Fatalf("key exists %d, %v; want %v", n, err, tt.exists)
			}
		})
	}

	t.Run("refund to full deletes the key", func(t *testing.T) {
		r, c := rlSetup(t, newFakeClock())
		rlAllow(t, r, "tok:1", free, 10)
		if err := r.Adjust(ctx, "tok:1", free, -10); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Exists(ctx, r.key("tok:1")).Result(); err != nil || n != 0 {
			t.Fatalf("key exists %d, %v; want deleted", n, err)
		}
		if err := r.Adjust(ctx, "tok:1", free, 0); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRedisConcurrentOneKey runs 200 goroutines against one key; run with
// -race. Exactly Capacity are admitted, on a frozen test clock and on the
// server's clock (where the refill is too slow to add a token meanwhile).
func TestRedisConcurrentOneKey(t *testing.T) {
	rlOptions(t) // skip the whole table without TEST_REDIS_URL
	tests := []struct {
		name   string
		clk    *fakeClock
		p      Params
		calls  int // per goroutine
		weight int64
	}{
		{"frozen clock", newFakeClock(), Params{Capacity: 500, RefillPerSec: 1}, 5, 1},
		{"server clock", nil, Params{Capacity: 300, RefillPerSec: 0.001}, 3, 1},
		{"server clock, weighted", nil, Params{Capacity: 300, RefillPerSec: 0.001}, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := rlSetup(t, tt.clk)
			admitted := rlHammer(t, []Limiter{r}, 200, tt.calls, func(l Limiter) (bool, error) {
				d, err := l.Allow(context.Background(), "tok:hot", tt.p, tt.weight)
				return d.Allowed, err
			})
			if want := tt.p.Capacity / tt.weight; admitted != want {
				t.Fatalf("admitted %d, want exactly %d", admitted, want)
			}
		})
	}
}

// rlHammer starts goroutines calls at once, spread over the limiters, and
// returns how many calls were admitted.
func rlHammer(t *testing.T, ls []Limiter, goroutines, calls int, call func(Limiter) (bool, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		l := ls[g%len(ls)]
		wg.Go(func() {
			<-start
			for range calls {
				ok, err := call(l)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

// TestRedisThreeNodes gives three limiters their own clients, as three
// gateway instances would have, sharing keys: together they admit no more
// than one bucket holds.
func TestRedisThreeNodes(t *testing.T) {
	opt := rlOptions(t)
	first := rlClient(t, opt)
	prefix := rlPrefix(t, first)
	nodes := []Limiter{NewRedis(first, prefix), NewRedis(rlClient(t, opt), prefix), NewRedis(rlClient(t, opt), prefix)}
	ctx := context.Background()

	reqs := Params{Capacity: 100, RefillPerSec: 0.001}
	if got := rlHammer(t, nodes, 200, 2, func(l Limiter) (bool, error) {
		d, err := l.Allow(ctx, "tok:1", reqs, 1)
		return d.Allowed, err
	}); got != 100 {
		t.Fatalf("Allow: admitted %d in total, want exactly 100", got)
	}

	// The tokens bucket allows 50 requests of 5 tokens, fewer than the 100
	// the requests bucket would.
	tpm := Params{Capacity: 250, RefillPerSec: 0.001}
	var charged atomic.Int64
	if got := rlHammer(t, nodes, 200, 2, func(l Limiter) (bool, error) {
		da, db, err := l.AllowBoth(ctx, Charge{"tok:2", reqs, 1}, Charge{"tok:2|tpm", tpm, 5})
		if da.Allowed != db.Allowed {
			return false, fmt.Errorf("AllowBoth answered %+v and %+v", da, db)
		}
		if db.Allowed {
			charged.Add(5)
		}
		return da.Allowed, err
	}); got != 50 {
		t.Fatalf("AllowBoth: admitted %d in total, want exactly 50", got)
	}
	if n := rlDrain(t, nodes[1], "tok:2", reqs); n != 50 {
		t.Fatalf("requests bucket had %d left, want 50: rejected pairs must not charge it", n)
	}
}

// TestRedisOneRoundTrip counts the commands each call sends: one EVALSHA.
func TestRedisOneRoundTrip(t *testing.T) {
	counter := newRLCounter()
	r, _ := rlSetup(t, nil, counter)
	ctx := context.Background()
	p := Params{Capacity: 1000, RefillPerSec: 1}
	// Loads the scripts if this server has not seen them (EVALSHA, then EVAL).
	rlAllow(t, r, "tok:1", p, 1)
	if err := r.Adjust(ctx, "tok:1", p, 1); err != nil {
		t.Fatal(err)
	}
	counter.counts()

	for i := range 20 {
		rlAllow(t, r, "tok:1", p, 1)
		if _, _, err := r.AllowBoth(ctx, Charge{"tok:1", p, 1}, Charge{"tok:1|tpm", p, 7}); err != nil {
			t.Fatal(err)
		}
		if err := r.Adjust(ctx, "tok:1|tpm", p, -2); err != nil {
			t.Fatal(err)
		}
		if _, err := r.AllowAll(ctx, []Charge{{"tok:1", p, 1}, {"tok:1|tpm", p, 7}, {"tok:1|tok:9", p, 1}}); err != nil {
			t.Fatal(err)
		}
		if got, want := counter.counts(), map[string]int{"evalsha": 4}; rlTotal(got) != 4 || got["evalsha"] != 4 {
			t.Fatalf("round %d: Allow, AllowBoth, AllowAll and Adjust sent %v, want %v", i, got, want)
		}
	}
}

// TestRedisKeyExpiry checks that keys expire once their bucket is full again,
// so idle tokens cost Redis nothing.
func TestRedisKeyExpiry(t *testing.T) {
	r, c := rlSetup(t, nil)
	ctx := context.Background()
	tpm := Params{Capacity: 1000, RefillPerSec: 1000.0 / 60}
	rlAllow(t, r, "tok:1", free, 10) // full again in 20s
	if _, _, err := r.AllowBoth(ctx, Charge{"tok:2", free, 1}, Charge{"tok:2|tpm", tpm, 500}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		key      string
		refilled time.Duration
	}{{"tok:1", 20 * time.Second}, {"tok:2", 2 * time.Second}, {"tok:2|tpm", 30 * time.Second}} {
		ttl, err := c.PTTL(ctx, r.key(k.key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := k.refilled + redisExpiryMargin*time.Millisecond; ttl <= 0 || ttl > want || ttl < want-5*time.Second {
			t.Errorf("%s: PTTL %v, want about %v", k.key, ttl, want)
		}
	}
}

// TestRedisErrors checks that a Redis that cannot be reached is an error
// (wrapped, and not a params error), never a decision.
func TestRedisErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	defer c.Close()
	r := NewRedis(c, "sluicetest:quota:")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	d, err := r.Allow(ctx, "tok:1", free, 1)
	if err == nil || d != (Decision{}) || errors.Is(err, ErrInvalidParams) || !strings.HasPrefix(err.Error(), "quota: redis allow: ") {
		t.Fatalf("Allow: got %+v, %v; want a wrapped connection error", d, err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("Allow: error %v does not wrap the *net.OpError", err)
	}
	if _, _, err := r.AllowBoth(ctx, Charge{"tok:1", free, 1}, Charge{"tok:1|tpm", free, 1}); err == nil {
		t.Fatal("AllowBoth: got no error")
	}
	if err := r.Adjust(ctx, "tok:1", free, 1); err == nil {
		t.Fatal("Adjust: got no error")
	}
}
