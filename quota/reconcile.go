package quota

import (
	"context"
	"sync"
	"sync/atomic"
)

// owedLedger is what local limits admitted that the shared buckets have not
// been charged for, per bucket key, until Degrading charges it to them.
//
// Two kinds of local decision end up here. A single request whose shared
// call failed (the breaker closed) owes its weight, added at once. During an
// outage the local buckets decide everything, and what they owe is what
// they spent beyond the state they started from: the outage's first local
// decision for a key notes that key's local TAT (the seed), and when the
// outage ends the local bucket's advance past it is converted into tokens.
// Counting the advance of the TAT rather than the requests admitted leaves
// out what refilled during the outage, which the shared bucket refilled too.
type owedLedger struct {
	mu      sync.Mutex
	keys    map[string]*owedKey
	pending atomic.Bool // some key has tokens to charge
	running atomic.Bool // a reconciliation is under way
}

type owedKey struct {
	p      Params // the bucket's shape as last seen, in shared terms
	tokens int64  // to charge to the shared bucket (negative: to refund)
	seed   int64  // the local TAT before the outage's first local decision
	epoch  uint64 // the outage seed belongs to; 0: none
}

func (l *owedLedger) entry(key string) *owedKey {
	if l.keys == nil {
		l.keys = make(map[string]*owedKey)
	}
	e := l.keys[key]
	if e == nil {
		e = &owedKey{}
		l.keys[key] = e
	}
	return e
}

// add owes tokens (a request's weight, or a settlement's delta) to key.
func (l *owedLedger) add(key string, p Params, tokens int64) {
	if tokens == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key)
	e.p, e.tokens = p, e.tokens+tokens
	l.pending.Store(true)
}

// noteOutage records key's local TAT the first time local limits decide for
// it in the current outage, before they charge anything.
func (l *owedLedger) noteOutage(key string, p Params, d *Degrading) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key)
	e.p = p
	if e.epoch != d.epoch {
		e.seed, e.epoch = d.local.tatOf(key), d.epoch
	}
}

// closeOutage converts what each key's local bucket spent during outage
// epoch into tokens owed, and returns how many keys owe something. Seeds of
// other epochs (a straggler's, noted as an outage ended) are dropped.
func (l *owedLedger) closeOutage(epoch uint64, local *Memory, share func(Params, int64) (Params, int64)) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	owing := 0
	now := local.nanos()
	for key, e := range l.keys {
		if e.epoch == epoch {
			if spent := local.tatOf(key) - max(e.seed, now); spent > 0 {
				lp, _ := share(e.p, 1)
				if s, err := newShape(lp, 1); err == nil {
					e.tokens += (spent + s.interval - 1) / s.interval // rounded up: never owe less
				}
			}
		}
		e.epoch = 0
		if e.tokens == 0 {
			delete(l.keys, key)
			continue
		}
		owing++
	}
	l.pending.Store(owing > 0)
	return owing
}

// take removes one key's owed tokens for charging; ok is false when nothing
// is owed.
func (l *owedLedger) take() (key string, p Params, tokens int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.keys {
		if e.tokens == 0 {
			continue
		}
		key, p, tokens = k, e.p, e.tokens
		e.tokens = 0
		if e.epoch == 0 {
			delete(l.keys, k)
		}
		return key, p, tokens, true
	}
	l.pending.Store(false)
	return "", Params{}, 0, false
}

// owedKeys is how many keys the ledger holds (owing or seeded), for tests.
func (l *owedLedger) owedKeys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// reconcileSoon starts charging what is owed to the shared buckets, unless
// that is under way.
func (d *Degrading) reconcileSoon() {
	if d.owed.running.CompareAndSwap(false, true) {
		d.spawn(d.reconcile)
	}
}

// reconcile charges the owed tokens to the shared buckets, one Adjust per
// key, until nothing is owed, the breaker opens, or a call fails (what it
// could not charge stays owed for the next answer of the shared limiter).
func (d *Degrading) reconcile() {
	for {
		for !d.degraded.Load() {
			key, p, tokens, ok := d.owed.take()
			if !ok {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
			err := d.shared.Adjust(ctx, key, p, tokens)
			cancel()
			if err != nil {
				d.owed.add(key, p, tokens)
				d.owed.running.Store(false)
				return
			}
			d.reconciled.Add(tokens)
		}
		d.owed.running.Store(false)
		// An add between the last take and now would otherwise wait for
		// the next shared answer.
		if d.degraded.Load() || !d.owed.pending.Load() || !d.owed.running.CompareAndSwap(false, true) {
			return
		}
	}
}
