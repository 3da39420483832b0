package upstream

import (
	"sync"
	"time"
)

// degradation is the rule that sends a model to sluice-local when its
// providers are failing slowly: every attempt that ends in a 5xx (or an
// attempt timeout) after more than slow counts one, any other outcome resets
// the count, and threshold counts in a row mark the model degraded for
// coolDown. While degraded, Do returns ErrUnavailable without sending
// anything, so clients get a fast local answer instead of waiting out the
// budget on a provider that is drowning; when the cool-down ends, traffic
// flows again and the rule starts counting afresh.
//
// The count is per model, not per key: a provider that is slow and failing
// usually is so for every key. State exists only for models that have had a
// slow failure, so arbitrary model names cost nothing.
type degradation struct {
	threshold int // < 0: the rule is off
	slow      time.Duration
	coolDown  time.Duration
	models    sync.Map // model name -> *modelHealth
}

type modelHealth struct {
	mu     sync.Mutex
	streak int
	until  time.Time
}

func (d *degradation) init(threshold int, slow, coolDown time.Duration) {
	d.threshold, d.slow, d.coolDown = threshold, slow, coolDown
}

// observe records one attempt's outcome for model and reports whether it
// tripped the rule.
func (d *degradation) observe(model string, slowFailure bool, now time.Time) bool {
	if d.threshold < 0 {
		return false
	}
	v, ok := d.models.Load(model)
	if !ok {
		if !slowFailure {
			return false
		}
		v, _ = d.models.LoadOrStore(model, &modelHealth{})
	}
	m := v.(*modelHealth)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slowFailure {
		m.streak = 0
		return false
	}
	m.streak++
	if m.streak < d.threshold {
		return false
	}
	m.streak = 0
	m.until = now.Add(d.coolDown)
	return true
}

// degraded reports whether model is degraded at now, and until when.
func (d *degradation) degraded(model string, now time.Time) (time.Time, bool) {
	v, ok := d.models.Load(model)
	if !ok {
		return time.Time{}, false
	}
	m := v.(*modelHealth)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.until, now.Before(m.until)
}
