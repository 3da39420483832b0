//go:build race

package bpe

// raceEnabled is set under the race detector, which makes sync.Pool drop
// what is put back at random, so pooled scratch is allocated again.
const raceEnabled = true
