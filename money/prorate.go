package money

import (
	"math"
	"math/bits"
)

// Proration adds up amounts that were each in force for part of a whole
// (seconds of a month), exactly: Σ amount × part / whole, in 128-bit
// integers, rounded down to the picodollar once, at the end. A monthly fee
// of MaxAmount times the seconds of a 31-day month is about 2.7 × 10^24,
// beyond int64 but far inside 128 bits.
//
// Rounding down to the picodollar and then half-up to the cent
// (RoundCents) is the same as rounding the exact fraction half-up to the
// cent: every half-cent boundary is a whole number of picodollars, and
// rounding down never carries a value across a whole number.
type Proration struct {
	whole  uint64
	hi, lo uint64 // the numerator, Σ amount × part
	over   bool   // the numerator left 128 bits (never, within the preconditions)
}

// NewProration starts a sum over a whole of whole units (whole > 0).
func NewProration(whole int64) Proration {
	if whole <= 0 {
		panic("money: a proration needs a whole above zero")
	}
	return Proration{whole: uint64(whole)}
}

// Add counts amount for part of the whole. Negative amounts and parts
// count as zero: a fee, a credit and a stretch of time are never negative.
func (p *Proration) Add(amount Amount, part int64) {
	if amount <= 0 || part <= 0 {
		return
	}
	hi, lo := bits.Mul64(uint64(amount), uint64(part))
	var carry uint64
	p.lo, carry = bits.Add64(p.lo, lo, 0)
	p.hi, carry = bits.Add64(p.hi, hi, carry)
	p.over = p.over || carry != 0
}

// Amount is the sum, rounded down to the picodollar. A sum whose parts add
// up to more than the whole could pass int64: it saturates at the largest
// Amount rather than wrap.
func (p Proration) Amount() Amount {
	if p.over || p.hi >= p.whole {
		return math.MaxInt64
	}
	q, _ := bits.Div64(p.hi, p.lo, p.whole)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return Amount(q)
}

// Prorate is amount × part / whole, rounded down to the picodollar and
// computed exactly: the share of a monthly amount for part of the month.
func Prorate(amount Amount, part, whole int64) Amount {
	p := NewProration(whole)
	p.Add(amount, part)
	return p.Amount()
}
