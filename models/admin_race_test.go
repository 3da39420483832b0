//go:build race

package models_test

// raceEnabled: the race detector slows every statement's Go side several
// times over, so speed budgets are logged, not enforced.
const raceEnabled = true
