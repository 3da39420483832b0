package money

import (
	"errors"
	"math"
	"testing"
)

func TestParsePrice(t *testing.T) {
	good := []struct {
		in   string
		want Price
		out  string
	}{
		{"0.50", 500_000, "0.50"},
		{"1.5", 1_500_000, "1.50"},
		{"0", 0, "0.00"},
		{"0.000001", 1, "0.000001"},
		{"0.000125", 125, "0.000125"},
		{"12", 12_000_000, "12.00"},
		{"1000", MaxPrice, "1000.00"},
	}
	for _, tc := range good {
		got, err := ParsePrice(tc.in)
		if err != nil || got != tc.want || got.String() != tc.out {
			t.Errorf("ParsePrice(%q) = %d %q %v, want %d %q", tc.in, got, got.String(), err, tc.want, tc.out)
		}
	}
	for _, in := range []string{"", ".5", "5.", "-1", "+1", "1e3", " 1", "1,5", "0.0000001", "1000.000001", "abc", "99999999999999999999"} {
		if _, err := ParsePrice(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePrice(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func TestParseAmount(t *testing.T) {
	a, err := ParseAmount("10.00")
	if err != nil || a != 10*Dollar || a.String() != "10.00" {
		t.Fatalf("%d %v", a, err)
	}
	a, err = ParseAmount("0.000000000001")
	if err != nil || a != Picodollar || a.String() != "0.000000000001" {
		t.Fatalf("%d %v", a, err)
	}
	if _, err := ParseAmount("1000000.000000000001"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("over the maximum: %v", err)
	}
	if _, err := ParseAmount("0.0000000000001"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("13 decimals: %v", err)
	}
}

// The reason for the unit: one token at the cheapest price has an exact
// cost, and sums of such costs never lose a digit.
func TestCostIsExact(t *testing.T) {
	cheapest, _ := ParsePrice("0.000001")
	if got := cheapest.Cost(1); got != Picodollar || got.String() != "0.000000000001" {
		t.Fatalf("one token at the cheapest price = %s", got)
	}
	// The float pitfall: 0.1 + 0.2 dollars' worth of tokens.
	p, _ := ParsePrice("0.10")
	q, _ := ParsePrice("0.20")
	if sum := p.Cost(1_000_000) + q.Cost(1_000_000); sum.String() != "0.30" {
		t.Fatalf("0.10 + 0.20 = %s", sum)
	}
	if p.Cost(-5) != 0 {
		t.Fatal("negative tokens cost nothing")
	}
	// The largest price times the largest token count fits.
	if c := MaxPrice.Cost(math.MaxInt32); c <= 0 {
		t.Fatalf("overflow: %d", c)
	}
}

func TestRoundCentsHalfUp(t *testing.T) {
	cases := []struct {
		in   Amount
		want string
	}{
		{0, "0.00"},
		{Cent/2 - 1, "0.00"},
		{Cent / 2, "0.01"}, // half a cent rounds up
		{12*Dollar + 345*Cent/10, "12.35"},
		{12*Dollar + 344*Cent/10 + 9_999_999_999/10, "12.34"},
		{-(Cent / 2), "-0.01"},
		{-(Cent/2 - 1), "0.00"},
	}
	for _, tc := range cases {
		if got := tc.in.StringCents(); got != tc.want {
			t.Errorf("%d.StringCents() = %s, want %s", tc.in, got, tc.want)
		}
	}
	if (Cent/2).RoundCents() != Cent || (-(Cent / 2)).RoundCents() != -Cent {
		t.Fatal("RoundCents")
	}
}

func TestFormatNegativeAndSmall(t *testing.T) {
	if got := Amount(-123).String(); got != "-0.000000000123" {
		t.Fatal(got)
	}
	if got := (3*Dollar + 5*Cent).String(); got != "3.05" {
		t.Fatal(got)
	}
	if got := Amount(math.MinInt64).String(); got != "-9223372.036854775808" {
		t.Fatal(got)
	}
}
