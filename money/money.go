// Package money is Sluice's exact arithmetic for prices and costs. Nothing
// here is a float: amounts are integers of picodollars, prices are integers
// of microdollars per million tokens, and both cross the API as decimal
// strings.
//
// Why picodollars: the cheapest price an admin can set is 0.000001 USD per
// million tokens, so the cheapest single token costs 10^-12 USD. With that
// unit every token at every price has an exact cost, and an int64 still
// holds ±9.2 million USD, far above one organization's monthly bill.
// Totals are rounded once, half-up to the cent, on invoice lines.
package money

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Amount is a sum of money in picodollars (10^-12 USD).
type Amount int64

// Units of Amount.
const (
	Picodollar Amount = 1
	Cent       Amount = 10_000_000_000    // 10^10 picodollars
	Dollar     Amount = 1_000_000_000_000 // 10^12 picodollars
)

// MaxAmount is the largest amount ParseAmount accepts: one million dollars,
// far below where int64 sums could overflow.
const MaxAmount = 1_000_000 * Dollar

// amountDecimals is how many decimals an Amount has.
const amountDecimals = 12

// Price is a price per million tokens in microdollars (10^-6 USD), which is
// the same number as picodollars per token: n tokens cost exactly n × Price
// picodollars.
type Price int64

// MaxPrice is the largest price ParsePrice accepts: 1,000 USD per million
// tokens. With it, even 2^31 tokens cost less than int64 can hold.
const MaxPrice Price = 1_000_000_000

// priceDecimals is how many decimals a Price has.
const priceDecimals = 6

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("money: invalid amount")

// ParsePrice reads a non-negative decimal string of dollars per million
// tokens, with at most 6 decimals, such as "0.50" or "0.000125".
func ParsePrice(s string) (Price, error) {
	n, err := parseDecimal(s, priceDecimals)
	if err != nil {
		return 0, err
	}
	if n > int64(MaxPrice) {
		return 0, fmt.Errorf("%w: %q is above %s per million tokens", ErrInvalid, s, MaxPrice)
	}
	return Price(n), nil
}

// ParseAmount reads a non-negative decimal string of dollars with at most
// 12 decimals, such as "10.00", up to MaxAmount.
func ParseAmount(s string) (Amount, error) {
	n, err := parseDecimal(s, amountDecimals)
	if err != nil {
		return 0, err
	}
	if n > int64(MaxAmount) {
		return 0, fmt.Errorf("%w: %q is above %s", ErrInvalid, s, MaxAmount)
	}
	return Amount(n), nil
}

// Cost is what n tokens cost at p. Tokens are counts the gateway made, never
// negative; a negative n costs nothing.
func (p Price) Cost(n int64) Amount {
	if n <= 0 {
		return 0
	}
	return Amount(n) * Amount(p)
}

// String is the price in dollars per million tokens, with at least two
// decimals and no trailing zeros beyond them: "0.50", "0.000125".
func (p Price) String() string { return formatDecimal(int64(p), priceDecimals) }

// String is the exact amount in dollars, with at least two decimals and no
// trailing zeros beyond them: "10.00", "-0.000000000123".
func (a Amount) String() string { return formatDecimal(int64(a), amountDecimals) }

// RoundCents rounds to the cent, half-up (half away from zero for negative
// amounts, so rounding and negation commute).
func (a Amount) RoundCents() Amount {
	if a < 0 {
		return -(-a).RoundCents()
	}
	return (a + Cent/2) / Cent * Cent
}

// Cents is the amount in whole cents, rounded half-up.
func (a Amount) Cents() int64 { return int64(a.RoundCents() / Cent) }

// StringCents is the amount rounded half-up to the cent, with exactly two
// decimals: "12.35". It is how invoices show money.
func (a Amount) StringCents() string {
	c := a.Cents()
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

// parseDecimal reads "123", "123.4" or "0.000125" into an integer scaled by
// 10^decimals, refusing signs, exponents, spaces and extra decimals.
func parseDecimal(s string, decimals int) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || dot && frac == "" || !digitsOnly(whole) || !digitsOnly(frac) {
		return 0, fmt.Errorf("%w: %q is not a decimal number like 12.34", ErrInvalid, s)
	}
	if len(frac) > decimals {
		return 0, fmt.Errorf("%w: %q has more than %d decimals", ErrInvalid, s, decimals)
	}
	if len(whole) > 13 { // beyond any maximum here; keeps the multiply below in range
		return 0, fmt.Errorf("%w: %q is too large", ErrInvalid, s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrInvalid, s)
	}
	f := int64(0)
	if frac != "" {
		f, err = strconv.ParseInt(frac+strings.Repeat("0", decimals-len(frac)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q", ErrInvalid, s)
		}
	}
	return w*pow10(decimals) + f, nil
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// formatDecimal writes n / 10^decimals with at least two decimals.
func formatDecimal(n int64, decimals int) string {
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-n) // -MinInt64 wraps to itself, which is its magnitude as uint64
	}
	scale := uint64(pow10(decimals))
	frac := strconv.FormatUint(u%scale, 10)
	frac = strings.Repeat("0", decimals-len(frac)) + frac
	frac = strings.TrimRight(frac, "0")
	if len(frac) < 2 {
		frac += strings.Repeat("0", 2-len(frac))
	}
	return sign + strconv.FormatUint(u/scale, 10) + "." + frac
}
