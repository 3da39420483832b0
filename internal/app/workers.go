package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
)

// prepareSchema applies migrations when asked to (always for `sluice
// migrate`), and otherwise refuses to serve on an older schema.
func prepareSchema(ctx context.Context, cfg config.Config, db *models.DB, stdout io.Writer) error {
	sqlDB, err := db.SQL()
	if err != nil {
		return err
	}
	dialect := migrations.Dialect(db.Dialect)
	if cfg.Command == "migrate" || cfg.AutoMigrate {
		applied, err := migrations.Apply(ctx, sqlDB, dialect)
		if err != nil {
			return err
		}
		queueApplied, err := jobs.Migrate(ctx, db, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		if len(applied) > 0 || queueApplied > 0 || cfg.Command == "migrate" {
			fmt.Fprintf(stdout, "Database (%s) migrated: applied %v, and %d job queue migrations\n", dialect, applied, queueApplied)
		}
		return nil
	}
	if err := migrations.Check(ctx, sqlDB, dialect); err != nil {
		return err
	}
	return jobs.CheckMigrated(ctx, db, cfg.DatabaseURL)
}

// reloadEvery refreshes tiers, freezes, prices and model aliases from the database, so a
// change made on another node is picked up within one interval even if its
// invalidation message was lost.
func reloadEvery(ctx context.Context, dir *accounts.Directory, bill *billing.Service, aliases *providers.Aliases, interval time.Duration, log *slog.Logger) {
	every(ctx, interval, func(ctx context.Context) {
		err := errors.Join(dir.ReloadTiers(ctx), dir.ReloadFreezes(ctx), bill.ReloadPrices(ctx), aliases.Reload(ctx))
		if err != nil && ctx.Err() == nil {
			log.Warn("reloading tiers, freezes, prices and model aliases failed; keeping the last ones", "err", err)
		}
	})
}

// expireEvery deletes, every interval, the rows of what that are past
// their retention (del says how many it deleted), logging what it did; a
// failure is left to the next run. Reads already ignore an expired row:
// this frees it.
func expireEvery(ctx context.Context, interval time.Duration, what string, del func(context.Context) (int64, error), log *slog.Logger) {
	every(ctx, interval, func(ctx context.Context) {
		n, err := del(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("deleting expired "+what+" failed; the next run tries again", "err", err)
		} else if n > 0 {
			log.Info("deleted expired "+what, what, n)
		}
	})
}

// purgeBatch is how many rows of a deleted organization one statement of
// the purge deletes.
const purgeBatch = 1000

// purgeOrganizationsEvery deletes, every interval, the data of the deleted
// organizations whose retention has passed (Store.PurgeDueOrganizations).
// Every node runs it: the deletes are idempotent and one node records each
// purge.
func purgeOrganizationsEvery(ctx context.Context, store *models.Store, interval time.Duration, log *slog.Logger) {
	every(ctx, interval, func(ctx context.Context) {
		ids, err := store.PurgeDueOrganizations(ctx, purgeBatch)
		if len(ids) > 0 {
			log.Info("purged deleted organizations", "organizations", ids)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("purging deleted organizations failed; the next run carries on", "err", err)
		}
	})
}

// every runs fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// browserURL turns a listener address into a URL a person can open.
func browserURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// servePprof serves Go's profiler on a loopback address, for operators
// chasing a hot spot; it is off unless SLUICE_PPROF_ADDR is set.
func servePprof(ctx context.Context, addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("pprof server stopped", "err", err)
	}
}
