package billing

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Invoice is one organization's bill for one calendar month (UTC).
type Invoice struct {
	ID          int64
	PeriodStart time.Time
	PeriodEnd   time.Time
	Status      string // "draft" while the month runs, "final" once closed; never changed after
	Currency    string
	Lines       []Line
	Total       money.Amount // the sum of the lines, each already rounded to the cent
	// PaymentStatus is what Stripe last said of a final invoice charged
	// through it (open, paid, failed, void), "" when not charged; HostedURL
	// is its page at Stripe.
	PaymentStatus string
	HostedURL     string
}

// Invoice statuses.
const (
	Draft = "draft"
	Final = "final"
)

// Line kinds.
const (
	LineFee    = "fee"
	LineUsage  = "usage"
	LineCredit = "credit"
	// LinePrepaid is usage already paid from the prepaid balance.
	LinePrepaid = "prepaid"
)

// Line is one line of an invoice. Usage lines are per model and price
// version, so a price change mid-month shows as two lines, each at the
// price it was billed at.
type Line struct {
	Kind             string
	Description      string
	Model            string
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	InputPrice       money.Price // per million tokens
	OutputPrice      money.Price
	CachedInputPrice money.Price
	Amount           money.Amount // rounded half-up to the cent
}

// Billed reports whether a usage line was billed at a price: a line of
// an unpriced model ("… (not billed)") has none to show. (A model priced
// at zero reads the same, and costs the same.)
func (l Line) Billed() bool {
	return l.Kind == LineUsage && (l.InputPrice != 0 || l.OutputPrice != 0 || l.CachedInputPrice != 0)
}

// Usage is a month's usage of one model at one price version (PriceID 0:
// not billed), with its exact cost.
type Usage struct {
	Model            string
	PriceID          int64
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	Cost             money.Amount // exact, in picodollars
	InputPrice       money.Price
	OutputPrice      money.Price
	CachedInputPrice money.Price
	EffectiveFrom    time.Time // of the price version
}

// Build makes an invoice from what the organization's tiers charged over
// the month (plan) and its usage: a fee line per (tier, terms version)
// pair in force in the month, one usage line per model and price version,
// and the included credit as negative lines, one per pair, covering usage
// up to the credit (the earlier pairs' first). A pair's fee and credit are
// prorated over the seconds it was in force: amount × seconds / seconds
// of the month, exactly. Each line is rounded once, half-up to the cent;
// the total is the sum of the rounded lines, so the lines always add up to
// it. Lines that come to nothing are left out.
func Build(plan models.MonthTerms, usage []Usage) Invoice { return BuildPaid(plan, usage, 0) }

// BuildPaid is Build for an organization that paid prepaid of the month's
// usage from its balance: a negative line takes it off the usage (rounded
// once, never more than the usage), before the included credit covers
// what is left, so usage paid in advance is never invoiced again.
func BuildPaid(plan models.MonthTerms, usage []Usage, prepaid money.Amount) Invoice {
	period := plan.Period
	inv := Invoice{PeriodStart: period, PeriodEnd: period.AddDate(0, 1, 0), Status: Draft, Currency: "USD"}
	for _, t := range plan.Terms {
		if fee := money.Prorate(t.Terms.MonthlyFee, t.Seconds, plan.Seconds).RoundCents(); fee > 0 {
			inv.Lines = append(inv.Lines, Line{Kind: LineFee, Description: feeDescription(plan, t), Amount: fee})
		}
	}
	usage = slices.Clone(usage)
	slices.SortFunc(usage, func(a, b Usage) int {
		if a.Model != b.Model {
			if a.Model < b.Model {
				return -1
			}
			return 1
		}
		return a.EffectiveFrom.Compare(b.EffectiveFrom)
	})
	var usageTotal money.Amount
	for _, u := range usage {
		l := Line{Kind: LineUsage, Model: u.Model, Requests: u.Requests, PromptTokens: u.PromptTokens,
			CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens, Amount: u.Cost.RoundCents()}
		if u.PriceID == 0 {
			l.Description = u.Model + " (not billed)"
		} else {
			l.InputPrice, l.OutputPrice, l.CachedInputPrice = u.InputPrice, u.OutputPrice, u.CachedInputPrice
			l.Description = u.Model + " at " + u.InputPrice.String() + " in / " + u.OutputPrice.String() +
				" out per million tokens, from " + u.EffectiveFrom.UTC().Format("2006-01-02 15:04 UTC")
		}
		usageTotal += l.Amount
		inv.Lines = append(inv.Lines, l)
	}
	left := usageTotal
	if paid := min(prepaid.RoundCents(), left); paid > 0 {
		inv.Lines = append(inv.Lines, Line{Kind: LinePrepaid, Description: "Usage paid from the prepaid balance", Amount: -paid})
		left -= paid
	}
	if plan.CreditWithheld {
		left = 0 // no credit line: it waits for a verified owner's email
	}
	for _, t := range plan.Terms {
		if credit := min(money.Prorate(t.Terms.IncludedCredit, t.Seconds, plan.Seconds).RoundCents(), left); credit > 0 {
			inv.Lines = append(inv.Lines, Line{Kind: LineCredit, Description: creditDescription(plan, t), Amount: -credit})
			left -= credit
		}
	}
	for _, l := range inv.Lines {
		inv.Total += l.Amount
	}
	return inv
}

// CSV writes the invoice as a spreadsheet: a header, one row per line and
// a total row. Amounts and prices are decimal strings.
func (inv Invoice) CSV() []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"period", "kind", "description", "model", "requests", "prompt_tokens", "completion_tokens",
		"cached_tokens", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "amount", "currency"})
	period := inv.PeriodStart.Format("2006-01")
	for _, l := range inv.Lines {
		row := []string{period, l.Kind, l.Description, l.Model, "", "", "", "", "", "", "", l.Amount.StringCents(), inv.Currency}
		if l.Kind == LineUsage {
			row[4], row[5], row[6], row[7] = itoa(l.Requests), itoa(l.PromptTokens), itoa(l.CompletionTokens), itoa(l.CachedTokens)
		}
		if l.Billed() {
			row[8], row[9], row[10] = l.InputPrice.String(), l.OutputPrice.String(), l.CachedInputPrice.String()
		}
		_ = w.Write(row)
	}
	_ = w.Write([]string{period, "total", fmt.Sprintf("%s invoice", inv.Status), "", "", "", "", "", "", "", "", inv.Total.StringCents(), inv.Currency})
	w.Flush()
	return b.Bytes()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// feeDescription names a fee line: the tier's plan and the month when the
// pair was in force all of it, as invoices always said; otherwise the fee
// it was at and when, so each version reads as its own line.
func feeDescription(plan models.MonthTerms, t models.TermsInForce) string {
	if t.Seconds == plan.Seconds {
		return t.Terms.TierName + " plan, " + plan.Period.Format("January 2006")
	}
	return t.Terms.TierName + " plan at $" + t.Terms.MonthlyFee.String() + " a month, " + inForce(plan, t)
}

// creditDescription names a credit line the same way.
func creditDescription(plan models.MonthTerms, t models.TermsInForce) string {
	if t.Seconds == plan.Seconds {
		return "included credit ($" + t.Terms.IncludedCredit.StringCents() + " a month)"
	}
	return "included credit ($" + t.Terms.IncludedCredit.String() + " a month, " + t.Terms.TierName + " plan), " + inForce(plan, t)
}

// inForce says when a pair was in force within the month and what share
// of it that is: "1–14 November 2026 (14 of 30 days)", or with times
// (UTC) when a stretch does not start and end at midnight:
// "14 November 2026 09:00 – 30 November 2026 17:30 UTC (16.35 of 30 days)".
func inForce(plan models.MonthTerms, t models.TermsInForce) string {
	parts := make([]string, len(t.Spans))
	for i, sp := range t.Spans {
		parts[i] = spanText(sp)
	}
	return strings.Join(parts, " and ") + " (" + days(t.Seconds) + " of " + days(plan.Seconds) + " days)"
}

const secondsPerDay = 24 * 60 * 60

// spanText is a stretch of time as a reader of an invoice says it: whole
// days as dates, the last one included; anything else from and to the
// minute (the second, when there is one), the end excluded.
func spanText(sp models.Span) string {
	from, to := sp.From.UTC(), sp.To.UTC()
	if from.Unix()%secondsPerDay == 0 && to.Unix()%secondsPerDay == 0 {
		last := to.AddDate(0, 0, -1)
		if last.Equal(from) {
			return from.Format("2 January 2006")
		}
		return strconv.Itoa(from.Day()) + "–" + last.Format("2 January 2006")
	}
	layout := "2 January 2006 15:04"
	if from.Second() != 0 || to.Second() != 0 {
		layout += ":05"
	}
	return from.Format(layout) + " – " + to.Format(layout) + " UTC"
}

// days is a count of seconds in days: whole, or with two decimals
// (half-up) for a part of a day; the amounts themselves use the exact seconds.
func days(seconds int64) string {
	if seconds%secondsPerDay == 0 {
		return strconv.FormatInt(seconds/secondsPerDay, 10)
	}
	hundredths := (seconds*100 + secondsPerDay/2) / secondsPerDay
	if hundredths == 0 {
		return "under 0.01"
	}
	return fmt.Sprintf("%d.%02d", hundredths/100, hundredths%100)
}
