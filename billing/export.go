package billing

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// Export is an organization's billing record as one zip, for an admin to
// hand over before (and after) the organization is deleted:
//
//   - invoices.json: every invoice, newest first, with its lines (amounts
//     and prices as exact decimal strings, in dollars);
//   - invoices/YYYY-MM.csv: each invoice as its CSV download;
//   - usage_daily.csv: usage per UTC day and model from the hourly
//     rollups (requests, rejected, tokens, exact cost in dollars), from
//     the organization's creation until now.
//
// A purged organization has nothing left to export: not found.
func (s *Service) Export(ctx context.Context, orgID int64) ([]byte, error) {
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return nil, err
	}
	if o.PurgedAt != nil {
		return nil, apperr.WithReason(apperr.NotFound, "organization_purged",
			fmt.Sprintf("%s was purged on %s: its invoices and usage are gone", o.Name, o.PurgedAt.UTC().Format(time.DateOnly)))
	}
	// The month's draft, of the month it was deleted in or of now, is
	// one of its invoices too (Invoices makes it when first listed).
	month := s.now()
	if o.DeletedAt != nil {
		month = *o.DeletedAt
	}
	if _, err := s.store.EnsureInvoice(ctx, orgID, month); err != nil {
		return nil, err
	}
	rows, err := s.store.Invoices(ctx, orgID)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	invoices := make([]exportInvoice, 0, len(rows))
	for _, r := range rows {
		inv, err := s.Invoice(ctx, orgID, r.ID)
		if err != nil {
			return nil, err
		}
		invoices = append(invoices, exportOf(inv))
		if err := zipFile(z, "invoices/"+inv.PeriodStart.Format("2006-01")+".csv", inv.CSV()); err != nil {
			return nil, err
		}
	}
	body, err := json.MarshalIndent(map[string]any{"organization": map[string]any{"id": o.ID, "name": o.Name,
		"created_at": o.CreatedAt.UTC(), "deleted_at": o.DeletedAt, "purge_after": o.PurgeAfter}, "invoices": invoices}, "", "  ")
	if err != nil {
		return nil, apperr.Wrap(err, "export invoices")
	}
	if err := zipFile(z, "invoices.json", body); err != nil {
		return nil, err
	}
	usage, err := s.dailyUsageCSV(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := zipFile(z, "usage_daily.csv", usage); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, apperr.Wrap(err, "export zip")
	}
	return buf.Bytes(), nil
}

type exportInvoice struct {
	ID          int64        `json:"id"`
	PeriodStart time.Time    `json:"period_start"`
	PeriodEnd   time.Time    `json:"period_end"`
	Status      string       `json:"status"`
	Currency    string       `json:"currency"`
	Total       string       `json:"total"`
	Lines       []exportLine `json:"lines"`
}

type exportLine struct {
	Kind               string `json:"kind"`
	Description        string `json:"description"`
	Model              string `json:"model,omitempty"`
	Requests           int64  `json:"requests"`
	PromptTokens       int64  `json:"prompt_tokens"`
	CompletionTokens   int64  `json:"completion_tokens"`
	CachedTokens       int64  `json:"cached_tokens"`
	InputPerMTok       string `json:"input_per_mtok"`
	OutputPerMTok      string `json:"output_per_mtok"`
	CachedInputPerMTok string `json:"cached_input_per_mtok"`
	Amount             string `json:"amount"`
}

func exportOf(inv Invoice) exportInvoice {
	out := exportInvoice{ID: inv.ID, PeriodStart: inv.PeriodStart, PeriodEnd: inv.PeriodEnd, Status: inv.Status,
		Currency: inv.Currency, Total: inv.Total.String(), Lines: []exportLine{}}
	for _, l := range inv.Lines {
		out.Lines = append(out.Lines, exportLine{Kind: l.Kind, Description: l.Description, Model: l.Model, Requests: l.Requests,
			PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, CachedTokens: l.CachedTokens,
			InputPerMTok: l.InputPrice.String(), OutputPerMTok: l.OutputPrice.String(), CachedInputPerMTok: l.CachedInputPrice.String(),
			Amount: l.Amount.String()})
	}
	return out
}

// dailyUsageCSV sums o's hourly rollups per UTC day and model.
func (s *Service) dailyUsageCSV(ctx context.Context, o models.Organization) ([]byte, error) {
	from := o.CreatedAt.UTC().Truncate(24 * time.Hour)
	hours, err := s.store.UsageHours(ctx, o.ID, from, s.now().Add(time.Hour), models.GroupModel)
	if err != nil {
		return nil, err
	}
	type key struct {
		day   time.Time
		model string
	}
	var order []key
	sums := map[key]*models.UsageBucket{}
	for _, h := range hours {
		k := key{h.Hour.UTC().Truncate(24 * time.Hour), h.Group}
		b := sums[k]
		if b == nil {
			b = &models.UsageBucket{}
			sums[k] = b
			order = append(order, k)
		}
		b.Requests += h.Requests
		b.Rejected += h.Rejected
		b.PromptTokens += h.PromptTokens
		b.CompletionTokens += h.CompletionTokens
		b.CachedTokens += h.CachedTokens
		b.Cost += h.Cost
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"day", "model", "requests", "rejected", "prompt_tokens", "completion_tokens", "cached_tokens", "cost"})
	for _, k := range order { // hours come in order, so days do too
		b := sums[k]
		_ = w.Write([]string{k.day.Format(time.DateOnly), k.model, itoa(b.Requests), itoa(b.Rejected), itoa(b.PromptTokens),
			itoa(b.CompletionTokens), itoa(b.CachedTokens), b.Cost.String()})
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}

func zipFile(z *zip.Writer, name string, body []byte) error {
	f, err := z.Create(name)
	if err == nil {
		_, err = f.Write(body)
	}
	if err != nil {
		return apperr.Wrap(err, "export "+name)
	}
	return nil
}
