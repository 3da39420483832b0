package accounts

// forgetTier drops the cached tokens of every organization on the tier,
// after its plan terms changed: their callers' IncludedCredit was prorated
// over the old terms. (Kept apart from directory.go, which holds the
// cache itself; other nodes refill within the cache TTL.)
func (d *Directory) forgetTier(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgets++
	for k, e := range d.tokens {
		if e.known && e.owner.TierName == name {
			delete(d.tokens, k)
		}
	}
}
