//go:build !race

package models_test

// raceEnabled: see admin_race_test.go.
const raceEnabled = false
