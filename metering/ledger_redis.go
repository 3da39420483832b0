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

// RedisLedger is the Ledger of a cluster: one hash per account and period,
// changed only by Lua scripts, so a reservation is one atomic round trip
// over all of a request's limits however many nodes reserve at once.
type RedisLedger struct {
	client redis.UniversalClient
	prefix string
	seed   Seed
}

// NewRedisLedger keeps balances under prefix ("sluice:budget:").
func NewRedisLedger(client redis.UniversalClient, prefix string, seed Seed) *RedisLedger {
	return &RedisLedger{client: client, prefix: prefix, seed: seed}
}

// key is one account's period. The braces hold the organization, so its
// balance and its tokens' are in one Redis Cluster slot and one script may
// reserve on all of them.
func (l *RedisLedger) key(a Account, period time.Time) string {
	k := l.prefix + "{" + strconv.FormatInt(a.OrgID, 10) + "}:"
	if a.TokenID != 0 {
		k += "tok:" + strconv.FormatInt(a.TokenID, 10) + ":"
	}
	return k + Period(period).Format("2006-01")
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

// needSeed is the reply of a script that found balances missing: -1 and
// the (1-based) indexes of the keys whose seed it needs.
const needSeed = `
local missing = {-1}
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 and ARGV[2 + 2 * i] == '' then missing[#missing + 1] = i end
end
if #missing > 1 then return missing end
for i = 1, #KEYS do seeded(KEYS[i], ARGV[2 + 2 * i], ARGV[2]) end
`

// reserveScript: KEYS the balances. ARGV: amount, idle TTL in seconds,
// then per key its limit and its seed ("" when the caller has not read the
// store). It reserves on every key if each fits under its limit, else on
// none, and returns {1|0, spent1, reserved1, spent2, ...}, or needSeed's
// reply.
var reserveScript = redis.NewScript(ledgerLua + needSeed + `
local ah, al = split(ARGV[1])
local out, ok = {1}, 1
for i = 1, #KEYS do
  local spent = redis.call('HGET', KEYS[i], 'spent')
  local reserved = redis.call('HGET', KEYS[i], 'reserved')
  local sh, sl = split(spent)
  local rh, rl = split(reserved)
  local lh, ll = split(ARGV[1 + 2 * i])
  local th, tl = add(sh, sl, rh, rl)
  th, tl = add(th, tl, ah, al)
  if not (th < lh or (th == lh and tl <= ll)) then ok = 0 end
  out[2 * i], out[2 * i + 1] = spent, reserved
end
out[1] = ok
if ok == 1 then
  for i = 1, #KEYS do
    -- HINCRBY's reply is a double in Lua: the exact sum is read back.
    redis.call('HINCRBY', KEYS[i], 'reserved', ARGV[1])
    out[2 * i + 1] = redis.call('HGET', KEYS[i], 'reserved')
  end
end
return out
`)

// settleScript: KEYS the balances. ARGV: actual, idle TTL, then per key
// what it reserved and its seed. Returns {spent1, reserved1, ...}, or
// needSeed's reply.
var settleScript = redis.NewScript(ledgerLua + needSeed + `
local out = {}
for i = 1, #KEYS do
  local r = ARGV[1 + 2 * i]
  if r ~= '0' then
    local reserved = redis.call('HINCRBY', KEYS[i], 'reserved', '-' .. r)
    if reserved < 0 then redis.call('HSET', KEYS[i], 'reserved', '0') end
  end
  redis.call('HINCRBY', KEYS[i], 'spent', ARGV[1])
  out[2 * i - 1] = redis.call('HGET', KEYS[i], 'spent')
  out[2 * i] = redis.call('HGET', KEYS[i], 'reserved')
end
return out
`)

// Reserve implements Ledger.
func (l *RedisLedger) Reserve(ctx context.Context, period time.Time, amount money.Amount, holds ...Hold) ([]Balance, bool, error) {
	accounts, per := make([]Account, len(holds)), make([]int64, len(holds))
	for i, h := range holds {
		accounts[i], per[i] = h.Account, int64(h.Limit)
	}
	var bs []Balance
	var ok bool
	err := l.run(ctx, period, reserveScript, accounts, int64(amount), per, func(reply []any) error {
		if len(reply) != 1+2*len(holds) {
			return fmt.Errorf("reserve: unexpected reply %v", reply)
		}
		ok = reply[0] == int64(1)
		var err error
		bs, err = balancesOf(reply[1:])
		return err
	})
	return bs, ok, err
}

// Settle implements Ledger.
func (l *RedisLedger) Settle(ctx context.Context, period time.Time, actual money.Amount, rs ...Release) ([]Balance, error) {
	accounts, per := make([]Account, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		accounts[i], per[i] = r.Account, int64(max(r.Reserved, 0))
	}
	var bs []Balance
	err := l.run(ctx, period, settleScript, accounts, int64(actual), per, func(reply []any) error {
		if len(reply) != 2*len(rs) {
			return fmt.Errorf("settle: unexpected reply %v", reply)
		}
		var err error
		bs, err = balancesOf(reply)
		return err
	})
	return bs, err
}

// Balance implements Ledger.
func (l *RedisLedger) Balance(ctx context.Context, a Account, period time.Time) (Balance, error) {
	vals, err := l.client.HMGet(ctx, l.key(a, period), "spent", "reserved").Result()
	if err != nil {
		return Balance{}, fmt.Errorf("ledger: %w", err)
	}
	if vals[0] == nil { // never used this period: what the store says
		spent, err := l.seed(ctx, a, Period(period))
		return Balance{Spent: spent}, err
	}
	return balanceOf(vals[0], vals[1])
}

// Reset implements Ledger.
func (l *RedisLedger) Reset(ctx context.Context, a Account, period time.Time) error {
	if err := l.client.Del(ctx, l.key(a, period)).Err(); err != nil {
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
func (l *RedisLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	billed, err := l.seed(ctx, a, Period(period))
	if err != nil {
		return err
	}
	if err := resyncScript.Run(ctx, l.client, []string{l.key(a, period)}, int64(billed)).Err(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// run calls script over the accounts' balances with ARGV total, the idle
// TTL and, per account, its value of per and its seed; and once more with
// the store's seeds of the balances the script found missing.
func (l *RedisLedger) run(ctx context.Context, period time.Time, script *redis.Script, accounts []Account, total int64, per []int64, read func([]any) error) error {
	keys := make([]string, len(accounts))
	for i, a := range accounts {
		keys[i] = l.key(a, period)
	}
	args := make([]any, 2+2*len(accounts))
	args[0], args[1] = total, strconv.FormatInt(int64(ledgerIdle/time.Second), 10)
	for i := range accounts {
		args[2+2*i], args[3+2*i] = per[i], ""
	}
	for range 2 {
		reply, err := script.Run(ctx, l.client, keys, args...).Slice()
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if len(reply) == 0 || reply[0] != int64(-1) {
			return read(reply)
		}
		for _, v := range reply[1:] {
			i, ok := v.(int64)
			if !ok || i < 1 || int(i) > len(accounts) {
				return fmt.Errorf("ledger: unexpected reply %v", reply)
			}
			spent, err := l.seed(ctx, accounts[i-1], Period(period))
			if err != nil {
				return err
			}
			args[3+2*(i-1)] = strconv.FormatInt(int64(spent), 10)
		}
	}
	return errors.New("ledger: balance vanished while seeding")
}

// balancesOf reads pairs of spent and reserved.
func balancesOf(reply []any) ([]Balance, error) {
	bs := make([]Balance, len(reply)/2)
	for i := range bs {
		b, err := balanceOf(reply[2*i], reply[2*i+1])
		if err != nil {
			return nil, err
		}
		bs[i] = b
	}
	return bs, nil
}

func balanceOf(spent, reserved any) (Balance, error) {
	s, err1 := strconv.ParseInt(fmt.Sprint(spent), 10, 64)
	r, err2 := strconv.ParseInt(fmt.Sprint(reserved), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Balance{}, fmt.Errorf("ledger: bad balance: %w", err)
	}
	return Balance{Spent: money.Amount(s), Reserved: money.Amount(r)}, nil
}
