package accounts

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

// TestAFloodOfUnknownKeysKeepsTheRealOnes: made-up keys fill the cache
// and are dropped when it is full; the real tokens cached stay, so a
// flood of them does not send every real request to the database.
func TestAFloodOfUnknownKeysKeepsTheRealOnes(t *testing.T) {
	d := &Directory{ttl: time.Minute, now: time.Now, maxEntries: 10, tokens: map[[sha256.Size]byte]tokenEntry{}}
	now := time.Now()
	key := func(i int) (sum [sha256.Size]byte) {
		sum[0], sum[1] = byte(i), byte(i>>8)
		return sum
	}
	for i := range 3 {
		d.remember(key(i), tokenEntry{known: true, fetchedAt: now}, d.forgets)
	}
	counted := func(when string) {
		t.Helper()
		n := 0
		for _, e := range d.tokens {
			if !e.known {
				n++
			}
		}
		if n != d.unknown {
			t.Fatalf("%s: %d unknown keys cached, counted %d", when, n, d.unknown)
		}
	}
	for i := 3; i < 1000; i++ {
		d.remember(key(i), tokenEntry{fetchedAt: now}, d.forgets)
		if len(d.tokens) > d.maxEntries {
			t.Fatalf("%d entries, more than the %d the cache holds", len(d.tokens), d.maxEntries)
		}
		counted("the flood")
	}
	for i := range 3 {
		if _, ok := d.tokens[key(i)]; !ok {
			t.Fatalf("real token %d was pushed out by made-up ones", i)
		}
	}
	// A made-up key that became real, and one forgotten, are counted off.
	d.remember(key(999), tokenEntry{known: true, fetchedAt: now}, d.forgets)
	counted("a key that became known")
	d.ForgetToken(hex.EncodeToString(func() []byte { k := key(998); return k[:] }()))
	counted("a key forgotten")
	// Full of real tokens: an unknown key is not kept, and none is pushed out.
	for i := 2000; len(d.tokens) < d.maxEntries || d.unknown > 0; i++ {
		d.remember(key(i), tokenEntry{known: true, fetchedAt: now}, d.forgets)
	}
	real := len(d.tokens)
	d.remember(key(5000), tokenEntry{fetchedAt: now}, d.forgets)
	if _, ok := d.tokens[key(5000)]; ok || len(d.tokens) != real {
		t.Fatalf("a cache full of real tokens kept an unknown key (%d entries, %d before)", len(d.tokens), real)
	}
	counted("full of real tokens")
}

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
