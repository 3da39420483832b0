//go:build race

package wire

// raceEnabled: the race detector's sync.Pool drops a quarter of what is
// put back, so pooled scans are sometimes made afresh.
const raceEnabled = true
