package accounts

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

// A revocation that lands while a lookup is reading the database must win:
// the lookup's (pre-revocation) answer is not cached.
func TestLookupRacingAnInvalidationIsNotCached(t *testing.T) {
	d := &Directory{ttl: time.Minute, now: time.Now, maxEntries: 10, tokens: map[[sha256.Size]byte]tokenEntry{}}
	var sum [sha256.Size]byte
	sum[0] = 1
	started := d.forgets // the lookup begins and goes to the database
	d.ForgetToken(hex.EncodeToString(sum[:]))
	d.remember(sum, tokenEntry{known: true, fetchedAt: time.Now()}, started)
	if _, ok := d.tokens[sum]; ok {
		t.Fatal("a lookup that raced a revocation was cached")
	}
	started = d.forgets
	d.ForgetOrganization(7)
	d.remember(sum, tokenEntry{known: true, fetchedAt: time.Now()}, started)
	if _, ok := d.tokens[sum]; ok {
		t.Fatal("a lookup that raced a tier change was cached")
	}
	d.remember(sum, tokenEntry{known: true, fetchedAt: time.Now()}, d.forgets)
	if _, ok := d.tokens[sum]; !ok {
		t.Fatal("a lookup with no invalidation in between must be cached")
	}
}
