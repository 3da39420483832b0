package billing

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"time"

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

// Plan is what a tier charges, as it stood when the invoice was made.
type Plan struct {
	Tier           string
	MonthlyFee     money.Amount
	IncludedCredit money.Amount
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

// Build makes an invoice: the plan fee, one usage line per model and price
// version, and the included credit as a negative line covering usage up to
// the credit. Each line is rounded once, half-up to the cent; the total is
// the sum of the rounded lines, so the lines always add up to it.
func Build(period time.Time, plan Plan, usage []Usage) Invoice {
	inv := Invoice{PeriodStart: period, PeriodEnd: period.AddDate(0, 1, 0), Status: Draft, Currency: "USD"}
	if plan.MonthlyFee > 0 {
		inv.Lines = append(inv.Lines, Line{Kind: LineFee, Description: plan.Tier + " plan, " + period.Format("January 2006"),
			Amount: plan.MonthlyFee.RoundCents()})
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
	if credit := min(plan.IncludedCredit.RoundCents(), usageTotal); credit > 0 {
		inv.Lines = append(inv.Lines, Line{Kind: LineCredit, Description: "included credit ($" + plan.IncludedCredit.StringCents() + " a month)",
			Amount: -credit})
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
