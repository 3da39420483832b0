package jobs

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/upstream"
)

// A job's retries back off far longer than a live request's: full jitter
// under a ceiling that starts at the retry base (10 s by default, above a
// live request's longest backoff) and doubles per attempt up to 10 minutes.
func TestRetriesBackOffLongerThanALiveRequest(t *testing.T) {
	cfg, err := config.Load(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JobRetryBase <= upstream.DefaultMaxBackoff {
		t.Fatalf("a job's first backoff ceiling %v is not above a live request's longest backoff %v", cfg.JobRetryBase, upstream.DefaultMaxBackoff)
	}
	w := &worker{retryBase: cfg.JobRetryBase}
	for attempt := 1; attempt <= 12; attempt++ {
		ceiling := min(cfg.JobRetryBase<<(attempt-1), 10*time.Minute)
		var longest time.Duration
		for range 200 {
			before := time.Now()
			d := w.NextRetry(&river.Job[Args]{JobRow: &rivertype.JobRow{Attempt: attempt}}).Sub(before)
			if d < 0 || d > ceiling+time.Second {
				t.Fatalf("attempt %d: backoff %v outside [0, %v]", attempt, d, ceiling)
			}
			longest = max(longest, d)
		}
		if longest < ceiling/2 { // 200 draws all in the lower half: about 2^-200
			t.Fatalf("attempt %d: longest of 200 backoffs %v, ceiling %v: not jittered up to the ceiling", attempt, longest, ceiling)
		}
	}
}

// What another attempt may fix is retried; what it cannot fails the job.
func TestWhatIsRetried(t *testing.T) {
	for code, want := range map[apperr.Code]bool{
		apperr.Unavailable: true, apperr.Timeout: true, apperr.BadUpstream: true, apperr.Internal: true,
		apperr.NoCredit: false, apperr.Invalid: false, apperr.Unauthorized: false, apperr.NotFound: false,
	} {
		if got := retryable(code); got != want {
			t.Errorf("%s: retryable %v, want %v", code, got, want)
		}
	}
}

// TestAJobIsRescuedOnlyAfterItsLongestAttempt: a job is run again only
// once it has run longer than an attempt can (a slow whole answer, after
// the retry budget), or a slow answer would be asked for, and paid to the
// provider, twice.
func TestAJobIsRescuedOnlyAfterItsLongestAttempt(t *testing.T) {
	for _, tc := range []struct {
		provider, want time.Duration
	}{
		{0, 5 * time.Minute},
		{30*time.Second + 10*time.Minute, 2*time.Second + 30*time.Second + 11*time.Minute},
	} {
		if got := rescueAfter(Config{MaxWait: 2 * time.Second, ProviderTime: tc.provider}); got != tc.want {
			t.Errorf("providers' time %v: rescued after %v, want %v", tc.provider, got, tc.want)
		}
	}
}
