package metering

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/money"
)

// RedisLedger is the Ledger of a cluster: one hash per organization and
// period, changed only by Lua scripts, so a reservation is one atomic round
// trip however many nodes reserve at once.
type RedisLedger struct {
	client redis.UniversalClient
	prefix string
	seed   Seed
}

// NewRedisLedger keeps balances under prefix ("sluice:budget:").
func NewRedisLedger(client redis.UniversalClient, prefix string, seed Seed) *RedisLedger {
	return &RedisLedger{client: client, prefix: prefix, seed: seed}
}

// key is one organization's period; the braces keep it in one Redis
// Cluster slot.
func (l *RedisLedger) key(orgID int64, period time.Time) string {
	return l.prefix + "{" + strconv.FormatInt(orgID, 10) + "}:" + Period(period).Format("2006-01")
}

// ledgerIdle is how long a balance nobody uses is kept. Past it, the next
// use starts again from the store, so a balance that went untracked for a
// while (the organization's limit removed and set again) cannot stay stale.
const ledgerIdle = time.Hour

// Money in Redis is an int64 of picodollars, changed with HINCRBY (exact
// 64-bit integers). Lua numbers are doubles, exact only to 2^53 picodollars
// (about 9,000 USD), so the scripts never add money as Lua numbers: they
// split each value into a high part and nine low digits, both exact in a
// double, and compare those.
const ledgerLua = `
local function split(s)
  s = tostring(s)
  local n = string.len(s)
  if n <= 9 then return 0, tonumber(s) end
  return tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))
end
local function add(ah, al, bh, bl)
  local l = al + bl
  local carry = math.floor(l / 1000000000)
  return ah + bh + carry, l - carry * 1000000000
end
local function seeded(key, seed, ttl)
  if redis.call('EXISTS', key) == 0 then
    if seed == '' then return false end
    redis.call('HSET', key, 'spent', seed, 'reserved', '0')
  end
  redis.call('EXPIRE', key, ttl)
  return true
end
`

// reserveScript: KEYS[1] the balance. ARGV: amount, limit, seed ("" when
// the caller has not read the store), idle TTL in seconds. Returns {1|0, spent,
// reserved}, or {-1} when the balance needs seeding.
var reserveScript = redis.NewScript(ledgerLua + `
if not seeded(KEYS[1], ARGV[3], ARGV[4]) then return {-1} end
local spent = redis.call('HGET', KEYS[1], 'spent')
local reserved = redis.call('HGET', KEYS[1], 'reserved')
local sh, sl = split(spent)
local rh, rl = split(reserved)
local ah, al = split(ARGV[1])
local lh, ll = split(ARGV[2])
local th, tl = add(sh, sl, rh, rl)
th, tl = add(th, tl, ah, al)
if th < lh or (th == lh and tl <= ll) then
  redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[1])
  return {1, spent, redis.call('HGET', KEYS[1], 'reserved')}
end
return {0, spent, reserved}
`)

// settleScript: KEYS[1] the balance. ARGV: reserved, actual, seed, ttl.
// Returns {spent, reserved}, or {-1} when the balance needs seeding.
var settleScript = redis.NewScript(ledgerLua + `
if not seeded(KEYS[1], ARGV[3], ARGV[4]) then return {-1} end
if ARGV[1] ~= '0' then
  local reserved = redis.call('HINCRBY', KEYS[1], 'reserved', '-' .. ARGV[1])
  if reserved < 0 then redis.call('HSET', KEYS[1], 'reserved', '0') end
end
redis.call('HINCRBY', KEYS[1], 'spent', ARGV[2])
return {redis.call('HGET', KEYS[1], 'spent'), redis.call('HGET', KEYS[1], 'reserved')}
`)

// Reserve implements Ledger.
func (l *RedisLedger) Reserve(ctx context.Context, orgID int64, period time.Time, amount, limit money.Amount) (Balance, bool, error) {
	var b Balance
	var ok bool
	err := l.run(ctx, orgID, period, reserveScript, func(reply []any) error {
		if len(reply) != 3 {
			return fmt.Errorf("reserve: unexpected reply %v", reply)
		}
		ok = reply[0] == int64(1)
		var err error
		b, err = balanceOf(reply[1], reply[2])
		return err
	}, int64(amount), int64(limit))
	return b, ok, err
}

// Settle implements Ledger.
func (l *RedisLedger) Settle(ctx context.Context, orgID int64, period time.Time, reserved, actual money.Amount) (Balance, error) {
	var b Balance
	err := l.run(ctx, orgID, period, settleScript, func(reply []any) error {
		if len(reply) != 2 {
			return fmt.Errorf("settle: unexpected reply %v", reply)
		}
		var err error
		b, err = balanceOf(reply[0], reply[1])
		return err
	}, int64(max(reserved, 0)), int64(actual))
	return b, err
}

// Balance implements Ledger.
func (l *RedisLedger) Balance(ctx context.Context, orgID int64, period time.Time) (Balance, error) {
	vals, err := l.client.HMGet(ctx, l.key(orgID, period), "spent", "reserved").Result()
	if err != nil {
		return Balance{}, fmt.Errorf("ledger: %w", err)
	}
	if vals[0] == nil { // never used this period: what the store says
		spent, err := l.seed(ctx, orgID, Period(period))
		return Balance{Spent: spent}, err
	}
	return balanceOf(vals[0], vals[1])
}

// Reset implements Ledger.
func (l *RedisLedger) Reset(ctx context.Context, orgID int64, period time.Time) error {
	if err := l.client.Del(ctx, l.key(orgID, period)).Err(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// resyncScript: KEYS[1] the balance. ARGV: what the store has billed.
// Raises spent to it when it is more; a missing balance is left to be
// seeded.
var resyncScript = redis.NewScript(ledgerLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local sh, sl = split(redis.call('HGET', KEYS[1], 'spent'))
local bh, bl = split(ARGV[1])
if sh < bh or (sh == bh and sl < bl) then
  redis.call('HSET', KEYS[1], 'spent', ARGV[1])
  return 1
end
return 0
`)

// Resync implements Ledger.
func (l *RedisLedger) Resync(ctx context.Context, orgID int64, period time.Time) error {
	billed, err := l.seed(ctx, orgID, Period(period))
	if err != nil {
		return err
	}
	if err := resyncScript.Run(ctx, l.client, []string{l.key(orgID, period)}, int64(billed)).Err(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// run calls script, and once more with the store's seed if the balance did
// not exist yet.
func (l *RedisLedger) run(ctx context.Context, orgID int64, period time.Time, script *redis.Script, read func([]any) error, a, b int64) error {
	key := l.key(orgID, period)
	ttl := strconv.FormatInt(int64(ledgerIdle/time.Second), 10)
	seed := ""
	for range 2 {
		reply, err := script.Run(ctx, l.client, []string{key}, a, b, seed, ttl).Slice()
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if len(reply) == 1 && reply[0] == int64(-1) {
			spent, err := l.seed(ctx, orgID, Period(period))
			if err != nil {
				return err
			}
			seed = strconv.FormatInt(int64(spent), 10)
			continue
		}
		return read(reply)
	}
	return errors.New("ledger: balance vanished while seeding")
}

func balanceOf(spent, reserved any) (Balance, error) {
	s, err1 := strconv.ParseInt(fmt.Sprint(spent), 10, 64)
	r, err2 := strconv.ParseInt(fmt.Sprint(reserved), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Balance{}, fmt.Errorf("ledger: bad balance: %w", err)
	}
	return Balance{Spent: money.Amount(s), Reserved: money.Amount(r)}, nil
}
