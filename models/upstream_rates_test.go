package models_test

import (
	"testing"

	"github.com/sluicehq/sluice/models"
)

// TestParseKeyRate covers the spelling of RPM and TPM that forms and JSON
// share: any whole number of 0 or more up to the largest int64, and nothing
// else.
func TestParseKeyRate(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, " 60 ": 60, "1e12": 1000000000000, "1.5e3": 1500, "1E6": 1000000,
		"9223372036854775807": 9223372036854775807} {
		if got, err := models.ParseKeyRate("tpm", in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "1.5", "1e19", "9223372036854775808", "0x10", "6/2", "1e-3", "lots", "1e123"} {
		if got, err := models.ParseKeyRate("tpm", in); err == nil {
			t.Errorf("%q: accepted as %d", in, got)
		}
	}
}
