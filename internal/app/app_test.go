package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/logging"
)

// TestShutdownLeavesNothingRunning builds a node, serves a few requests
// with its workers ticking fast, and shuts it down: once Shutdown returns
// every goroutine the node started has exited, and nothing touched the
// database after it. Embedded, and on Postgres and Redis where the
// environment has them.
func TestShutdownLeavesNothingRunning(t *testing.T) {
	variants := map[string]func(t *testing.T) map[string]string{
		"embedded": func(t *testing.T) map[string]string { return map[string]string{} },
		"postgres and redis": func(t *testing.T) map[string]string {
			redisURL := os.Getenv("TEST_REDIS_URL")
			if redisURL == "" {
				t.Skip("TEST_REDIS_URL is not set: skipping the shared-state variant (CI sets it)")
			}
			return map[string]string{"DATABASE_URL": testdb.PostgresURL(t), "REDIS_URL": redisURL,
				"SLUICE_REDIS_PREFIX": "shutdown-" + strings.ToLower(t.Name()[len(t.Name())-4:]) + ":",
				"SLUICE_MASTER_KEY":   "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"}
		},
	}
	for name, envFor := range variants {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_AUTO_MIGRATE": "true", "SLUICE_BCRYPT_COST": "4",
				// Workers that tick as often as they may, so one still running
				// after Shutdown would show.
				"SLUICE_TOKEN_CACHE_TTL": "1s", "SLUICE_TUNE_INTERVAL": "100ms", "SLUICE_INVOICE_INTERVAL": "1s",
				"SLUICE_SHUTDOWN_TIMEOUT": "5s"}
			for k, v := range envFor(t) {
				env[k] = v
			}
			ignore := goleak.IgnoreCurrent()
			cfg, err := config.Load([]string{"-addr", "127.0.0.1:0"}, func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			out := &testsync.Buffer{}
			ctx := context.Background()
			a, err := Build(ctx, cfg, logging.New(out, "info", "text"), io.Discard, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var touches atomic.Int64
			countTouches(t, a.db.Gorm, &touches)
			if _, err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: &http.Transport{}}
			for _, path := range []string{"/healthz", "/readyz", "/v1/models", "/login"} {
				resp, err := client.Get("http://" + a.Addr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			client.CloseIdleConnections()
			testsync.WaitFor(t, 5*time.Second, "a worker touching the database", func() bool { return touches.Load() > 0 })

			if err := a.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v\n%s", err, out.String())
			}
			after := touches.Load()
			if err := goleak.Find(ignore); err != nil {
				t.Fatalf("goroutines still running after Shutdown returned:\n%v", err)
			}
			if n := touches.Load(); n != after {
				t.Fatalf("the database was used %d times after Shutdown returned", n-after)
			}
			if strings.Contains(out.String(), "level=ERROR") {
				t.Errorf("errors logged while stopping:\n%s", out.String())
			}
		})
	}
}

// countTouches counts every statement gorm runs on db.
func countTouches(t *testing.T, db *gorm.DB, n *atomic.Int64) {
	t.Helper()
	count := func(*gorm.DB) { n.Add(1) }
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().After("gorm:create").Register("test:count", count),
		cb.Query().After("gorm:query").Register("test:count", count),
		cb.Update().After("gorm:update").Register("test:count", count),
		cb.Delete().After("gorm:delete").Register("test:count", count),
		cb.Row().After("gorm:row").Register("test:count", count),
		cb.Raw().After("gorm:raw").Register("test:count", count),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestMain keeps gin quiet: Run sets its mode, Build alone does not.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}
