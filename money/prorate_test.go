package money

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestProrateIsExact(t *testing.T) {
	const november = 30 * 86400
	cases := []struct {
		name        string
		amount      Amount
		part, whole int64
		want        Amount
	}{
		{"half a month", 49 * Dollar, november / 2, november, 24*Dollar + 50*Cent},
		{"a third, rounded down to the picodollar", 10 * Dollar, november / 3, november, 3_333_333_333_333},
		{"all of it", MaxAmount, 31 * 86400, 31 * 86400, MaxAmount},
		{"the largest amount for all but a second of 31 days: past int64 on the way", MaxAmount, 31*86400 - 1, 31 * 86400,
			999_999_626_642_771_804}, // floor(10^18 × 2678399 / 2678400)
		{"nothing of it", 49 * Dollar, 0, november, 0},
		{"a negative part counts as none", 49 * Dollar, -5, november, 0},
	}
	for _, tc := range cases {
		if got := Prorate(tc.amount, tc.part, tc.whole); got != tc.want {
			t.Errorf("%s: Prorate(%d, %d, %d) = %d, want %d", tc.name, tc.amount, tc.part, tc.whole, got, tc.want)
		}
	}
	// A sum is rounded once: $10 for 15 days and 4 seconds, then $4 for
	// the rest of a 30-day month, is $7 and 24/2592000 of a dollar,
	// rounded down to the picodollar; rounding each part would lose one.
	p := NewProration(november)
	p.Add(10*Dollar, 15*86400+4)
	p.Add(4*Dollar, 15*86400-4)
	if got := p.Amount(); got != 7_000_009_259_259 {
		t.Errorf("the sum = %d", got)
	}
	if got := Prorate(10*Dollar, 15*86400+4, november) + Prorate(4*Dollar, 15*86400-4, november); got != 7_000_009_259_258 {
		t.Errorf("the rounded parts = %d", got)
	}
	over := NewProration(1)
	over.Add(MaxAmount, math.MaxInt64)
	if over.Amount() != math.MaxInt64 {
		t.Error("a sum past int64 must saturate")
	}
}

// Rounding the picodollars Prorate gives half-up to the cent is rounding
// the exact fraction half-up to the cent, for any amount and share.
func TestProratedCentsAreTheExactFractionRounded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	half := big.NewRat(1, 2)
	for i := range 20000 {
		whole := int64(28+r.IntN(4)) * 86400
		part := r.Int64N(whole + 1)
		amount := Amount(r.Int64N(int64(MaxAmount) + 1))
		if i%3 == 0 { // amounts and shares that land on half cents
			amount = Amount(r.Int64N(10_000)) * Cent / 2
			part = whole / 2
		}
		exact := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(int64(amount)), big.NewInt(part)),
			new(big.Int).Mul(big.NewInt(whole), big.NewInt(int64(Cent))))
		cents := new(big.Int).Quo(new(big.Rat).Add(exact, half).Num(), new(big.Rat).Add(exact, half).Denom()) // floor: positive
		if got := Prorate(amount, part, whole).Cents(); got != cents.Int64() {
			t.Fatalf("%d × %d / %d: %d cents, the exact fraction rounds to %s", amount, part, whole, got, cents)
		}
	}
}
