package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// A small seed lands every event in the rollups exactly once, and refuses
// to seed the same database twice.
func TestSeedFillsTheRollups(t *testing.T) {
	url := testdb.PostgresURL(t)
	var out bytes.Buffer
	args := []string{"-database-url", url, "-orgs", "5", "-events", "20000", "-days", "40", "-batch", "3000", "-workers", "2"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "20000 usage events over 40 days") {
		t.Fatalf("output: %s", out.String())
	}
	db, err := models.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var events, monthly, hourly, priced int64
	db.Gorm.Raw("SELECT COUNT(*) FROM usage_events").Scan(&events)
	db.Gorm.Raw("SELECT COALESCE(SUM(requests), 0) FROM usage_monthly").Scan(&monthly)
	db.Gorm.Raw("SELECT COALESCE(SUM(requests), 0) FROM usage_hourly").Scan(&hourly)
	db.Gorm.Raw("SELECT COUNT(DISTINCT price_id) FROM usage_events WHERE price_id > 0").Scan(&priced)
	if events != 20000 || monthly != 20000 || hourly != 20000 || priced != 5 {
		t.Fatalf("events %d, monthly %d, hourly %d, price versions used %d", events, monthly, hourly, priced)
	}
	if err := run(context.Background(), args, func(string) string { return "" }, &out); err == nil || !strings.Contains(err.Error(), "already has") {
		t.Fatalf("seeding twice: %v", err)
	}
}
