package models

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/money"
)

// appendUsageJSON must write what encoding/json wrote for the same rows
// before it: the same values, read back by the same SQL.
func TestAppendUsageJSONReadsAsEncodingJSONWould(t *testing.T) {
	key := int64(7)
	at := time.Date(2026, 11, 30, 22, 28, 38, 100_000_000, time.FixedZone("x", 5*3600+1800))
	evs := []UsageEvent{
		{RequestID: "req_1", OrgID: 1, TokenID: 2, Model: "gpt-4o-mini", PromptTokens: 10, CompletionTokens: 20,
			CachedTokens: 3, Cost: money.Amount(1_234_567), PriceID: 9, Status: 200, LatencyMs: 12,
			Cached: true, UpstreamKeyID: &key, CreatedAt: at, CacheCreationTokens: 4, ReasoningTokens: 5, Dialect: "messages", Prepaid: true},
		{RequestID: "req_2", OrgID: 1 << 40, TokenID: -1, Model: "we\"ird\\ é <m> & \u2028 \x01 \xff",
			Cost: money.Amount(-5), Status: 429, Fallback: true, CreatedAt: at.Add(time.Hour)},
	}
	var want []any
	for _, e := range evs {
		want = append(want, [19]any{e.RequestID, e.OrgID, e.TokenID, e.Model, e.PromptTokens, e.CompletionTokens,
			e.CachedTokens, int64(e.Cost), e.PriceID, e.Status, e.LatencyMs, e.Cached, e.Fallback, e.UpstreamKeyID,
			e.CreatedAt.UTC().Format(sqliteTime), e.CacheCreationTokens, e.ReasoningTokens, e.Dialect, e.Prepaid})
	}
	old, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got, expected any
	if err := json.Unmarshal(appendUsageJSON(nil, evs), &got); err != nil {
		t.Fatalf("appendUsageJSON wrote invalid JSON: %v", err)
	}
	if err := json.Unmarshal(old, &expected); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, expected) {
		t.Errorf("appendUsageJSON reads as\n%v\nwant\n%v", got, expected)
	}
	if got := string(appendUsageJSON(nil, nil)); got != "[]" {
		t.Errorf("no events = %q, want []", got)
	}
}

func TestUniqueRequestsDropsRepeatsAndCopiesOnlyThen(t *testing.T) {
	evs := []UsageEvent{{RequestID: "a"}, {RequestID: "b"}, {RequestID: "c"}}
	if got := uniqueRequests(evs); &got[0] != &evs[0] || len(got) != 3 {
		t.Errorf("a batch without repeats was copied or cut: %v", got)
	}
	evs = []UsageEvent{{RequestID: "a", OrgID: 1}, {RequestID: "b"}, {RequestID: "a", OrgID: 2}, {RequestID: "c"}, {RequestID: "b"}}
	got := uniqueRequests(evs)
	var ids []string
	for _, e := range got {
		ids = append(ids, e.RequestID)
	}
	if !reflect.DeepEqual(ids, []string{"a", "b", "c"}) || got[0].OrgID != 1 {
		t.Errorf("uniqueRequests = %v, want a (the first), b, c", got)
	}
	if evs[2].RequestID != "a" || evs[2].OrgID != 2 {
		t.Errorf("uniqueRequests changed its input: %v", evs)
	}
}
