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
// over all of a request's limits however many nodes reserve at once. A
// prepaid balance is one more hash, with no period, which also holds what
// the organization was credited and had withdrawn: they only grow, so the
// scripts raise them to what the store says (seeding, Resync after a
// credit) and any order of raises from any node ends at the same figures.
type RedisLedger struct {
	client redis.UniversalClient
	prefix string
	seed   Seed
	funds  Funds
}

// NewRedisLedger keeps balances under prefix ("sluice:budget:").
func NewRedisLedger(client redis.UniversalClient, prefix string, seed Seed, opts ...LedgerOption) *RedisLedger {
	return &RedisLedger{client: client, prefix: prefix, seed: seed, funds: optionsOf(opts).funds}
}

// key is one account's period. The braces hold the organization, so its
// balance and its tokens' are in one Redis Cluster slot and one script may
// reserve on all of them.
func (l *RedisLedger) key(a Account, period time.Time) string {
	k := l.prefix + "{" + strconv.FormatInt(a.OrgID, 10) + "}:"
	if a.Prepaid {
		return k + "prepaid"
	}
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
// double, and compare those. A balance is seeded when it has no 'spent'
// (a Resync may have raised the credits of one not seeded yet).
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
local function field(key, f)
  local v = redis.call('HGET', key, f)
  if v then return v end
  return '0'
end
local function raise(key, f, v)
  if v == '' or v == '0' then return end
  local cur = redis.call('HGET', key, f)
  if cur then
    local ch, cl = split(cur)
    local vh, vl = split(v)
    if not (ch < vh or (ch == vh and cl < vl)) then return end
  end
  redis.call('HSET', key, f, v)
end
local function seeded(key, spent, credited, withdrawn, ttl)
  if redis.call('HEXISTS', key, 'spent') == 0 then
    if spent == '' then return false end
    redis.call('HSET', key, 'spent', spent, 'reserved', '0')
  end
  raise(key, 'credited', credited)
  raise(key, 'withdrawn', withdrawn)
  redis.call('EXPIRE', key, ttl)
  return true
end
`

// needSeed is the reply of a script that found balances missing: -1 and
// the (1-based) indexes of the keys whose seed it needs. Each key has four
// ARGV from ARGV[4i-1]: its value (a limit, or what it reserved), then
// its seed: spent, credited, withdrawn ("" when the caller has not read
// the store).
const needSeed = `
local missing = {-1}
for i = 1, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'spent') == 0 and ARGV[4 * i] == '' then missing[#missing + 1] = i end
end
if #missing > 1 then return missing end
for i = 1, #KEYS do seeded(KEYS[i], ARGV[4 * i], ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[2]) end
`

// reserveScript: KEYS the balances. ARGV: amount, idle TTL in seconds,
// then per key its limit and its seed. It reserves on every key if each
// fits (spent + reserved + amount + withdrawn <= limit + credited), else
// on none, and returns {1|0, spent1, reserved1, credited1, withdrawn1,
// spent2, ...}, or needSeed's reply.
var reserveScript = redis.NewScript(ledgerLua + needSeed + `
local ah, al = split(ARGV[1])
local out, ok = {1}, 1
for i = 1, #KEYS do
  local spent, reserved = field(KEYS[i], 'spent'), field(KEYS[i], 'reserved')
  local credited, withdrawn = field(KEYS[i], 'credited'), field(KEYS[i], 'withdrawn')
  local sh, sl = split(spent)
  local rh, rl = split(reserved)
  local wh, wl = split(withdrawn)
  local th, tl = add(sh, sl, rh, rl)
  th, tl = add(th, tl, ah, al)
  th, tl = add(th, tl, wh, wl)
  local lh, ll = split(ARGV[4 * i - 1])
  local ch, cl = split(credited)
  lh, ll = add(lh, ll, ch, cl)
  if not (th < lh or (th == lh and tl <= ll)) then ok = 0 end
  local o = 4 * i - 2
  out[o], out[o + 1], out[o + 2], out[o + 3] = spent, reserved, credited, withdrawn
end
out[1] = ok
if ok == 1 then
  for i = 1, #KEYS do
    -- HINCRBY's reply is a double in Lua: the exact sum is read back.
    redis.call('HINCRBY', KEYS[i], 'reserved', ARGV[1])
    out[4 * i - 1] = redis.call('HGET', KEYS[i], 'reserved')
  end
end
return out
`)

// settleScript: KEYS the balances. ARGV: actual, idle TTL, then per key
// what it reserved and its seed. Returns {spent1, reserved1, credited1,
// withdrawn1, ...}, or needSeed's reply.
var settleScript = redis.NewScript(ledgerLua + needSeed + `
local out = {}
for i = 1, #KEYS do
  local r = ARGV[4 * i - 1]
  if r ~= '0' then
    local reserved = redis.call('HINCRBY', KEYS[i], 'reserved', '-' .. r)
    if reserved < 0 then redis.call('HSET', KEYS[i], 'reserved', '0') end
  end
  redis.call('HINCRBY', KEYS[i], 'spent', ARGV[1])
  local o = 4 * i - 3
  out[o], out[o + 1] = redis.call('HGET', KEYS[i], 'spent'), redis.call('HGET', KEYS[i], 'reserved')
  out[o + 2], out[o + 3] = field(KEYS[i], 'credited'), field(KEYS[i], 'withdrawn')
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
		if len(reply) != 1+4*len(holds) {
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
		if len(reply) != 4*len(rs) {
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
	vals, err := l.client.HMGet(ctx, l.key(a, period), "spent", "reserved", "credited", "withdrawn").Result()
	if err != nil {
		return Balance{}, fmt.Errorf("ledger: %w", err)
	}
	if vals[0] == nil { // never used (this period): what the store says
		return l.stored(ctx, a, period)
	}
	return balanceOf(vals[0], vals[1], vals[2], vals[3])
}

// stored is what the store says of an account.
func (l *RedisLedger) stored(ctx context.Context, a Account, period time.Time) (Balance, error) {
	spent, err := l.seed(ctx, a, Period(period))
	if err != nil || !a.Prepaid {
		return Balance{Spent: spent}, err
	}
	credited, withdrawn, err := l.funds(ctx, a.OrgID)
	return Balance{Spent: spent, Credited: credited, Withdrawn: withdrawn}, err
}

// Reset implements Ledger.
func (l *RedisLedger) Reset(ctx context.Context, a Account, period time.Time) error {
	if err := l.client.Del(ctx, l.key(a, period)).Err(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// resyncScript: KEYS[1] the balance. ARGV: what the store has billed,
// credited and withdrawn ("" for a budget), the idle TTL. Raises each to
// the store's when it is more. Spending is left to be seeded on a balance
// not seeded yet, but the credits are raised even then: a seed that read
// the store before a credit and lands after this keeps the credit.
var resyncScript = redis.NewScript(ledgerLua + `
raise(KEYS[1], 'credited', ARGV[2])
raise(KEYS[1], 'withdrawn', ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
if redis.call('HEXISTS', KEYS[1], 'spent') == 0 then return 0 end
raise(KEYS[1], 'spent', ARGV[1])
return 1
`)

// Resync implements Ledger.
func (l *RedisLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	st, err := l.stored(ctx, a, period)
	if err != nil {
		return err
	}
	credited, withdrawn := "", ""
	if a.Prepaid {
		credited, withdrawn = strconv.FormatInt(int64(st.Credited), 10), strconv.FormatInt(int64(st.Withdrawn), 10)
	}
	err = resyncScript.Run(ctx, l.client, []string{l.key(a, period)}, strconv.FormatInt(int64(st.Spent), 10), credited, withdrawn,
		strconv.FormatInt(int64(ledgerIdle/time.Second), 10)).Err()
	if err != nil {
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
	args := make([]any, 2+4*len(accounts))
	args[0], args[1] = total, strconv.FormatInt(int64(ledgerIdle/time.Second), 10)
	for i := range accounts {
		args[2+4*i], args[3+4*i], args[4+4*i], args[5+4*i] = per[i], "", "", ""
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
			st, err := l.stored(ctx, accounts[i-1], period)
			if err != nil {
				return err
			}
			j := 3 + 4*(i-1)
			args[j], args[j+1], args[j+2] = strconv.FormatInt(int64(st.Spent), 10),
				strconv.FormatInt(int64(st.Credited), 10), strconv.FormatInt(int64(st.Withdrawn), 10)
		}
	}
	return errors.New("ledger: balance vanished while seeding")
}

// balancesOf reads fours of spent, reserved, credited and withdrawn.
func balancesOf(reply []any) ([]Balance, error) {
	bs := make([]Balance, len(reply)/4)
	for i := range bs {
		b, err := balanceOf(reply[4*i], reply[4*i+1], reply[4*i+2], reply[4*i+3])
		if err != nil {
			return nil, err
		}
		bs[i] = b
	}
	return bs, nil
}

// balanceOf reads a balance's fields; a missing one (nil) is 0.
func balanceOf(vals ...any) (Balance, error) {
	var n [4]int64
	for i, v := range vals {
		if v == nil {
			continue
		}
		x, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		if err != nil {
			return Balance{}, fmt.Errorf("ledger: bad balance: %w", err)
		}
		n[i] = x
	}
	return Balance{Spent: money.Amount(n[0]), Reserved: money.Amount(n[1]), Credited: money.Amount(n[2]), Withdrawn: money.Amount(n[3])}, nil
}
