// Command seed fills a Postgres database with a realistic load for
// measuring the dashboard and admin pages: organizations with owners and
// tokens, model prices (one changed mid-way), and usage events over past
// days, stored through the recorder's own insert so the rollups are exactly
// what production keeps. It prints the credentials of the accounts it made.
//
//	DATABASE_URL=postgres://… go run ./cmd/seed -orgs 1000 -events 10000000 -days 90
//
// It refuses a database that already has organizations, unless -force.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "seed:", err)
		os.Exit(1)
	}
}

// config is seed's flags.
type config struct {
	databaseURL string
	orgs        int
	events      int
	days        int
	batch       int
	workers     int
	password    string
	force       bool
	seed        uint64
}

func parse(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "postgres:// URL (default $DATABASE_URL)")
	fs.IntVar(&c.orgs, "orgs", 1000, "organizations to create")
	fs.IntVar(&c.events, "events", 10_000_000, "usage events to store")
	fs.IntVar(&c.days, "days", 90, "days back the events are spread over")
	fs.IntVar(&c.batch, "batch", 16384, "events per insert")
	fs.IntVar(&c.workers, "workers", 2, "concurrent inserts")
	fs.StringVar(&c.password, "password", "bench-password", "password of every account made")
	fs.BoolVar(&c.force, "force", false, "seed a database that already has organizations")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed, so runs are repeatable")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.databaseURL == "":
		return c, errors.New("-database-url (or DATABASE_URL) is required: a postgres:// URL")
	case c.orgs < 1 || c.events < 0 || c.days < 1 || c.batch < 1 || c.workers < 1:
		return c, errors.New("-orgs, -days, -batch and -workers must be at least 1, -events at least 0")
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	c, err := parse(args, getenv)
	if err != nil {
		return err
	}
	db, err := models.Open(ctx, c.databaseURL, "")
	if err != nil {
		return err
	}
	defer db.Close()
	if db.Dialect != "postgres" {
		return errors.New("seed is for Postgres: the speed goals are measured there")
	}
	sqlDB, err := db.SQL()
	if err != nil {
		return err
	}
	if _, err := migrations.Apply(ctx, sqlDB, migrations.Dialect(db.Dialect)); err != nil {
		return err
	}
	store := models.NewStore(db)
	var n int64
	if err := db.Gorm.WithContext(ctx).Raw("SELECT COUNT(*) FROM organizations").Scan(&n).Error; err != nil {
		return err
	}
	if n > 0 && !c.force {
		return fmt.Errorf("the database already has %d organizations; use a fresh one or -force", n)
	}
	rnd := rand.New(rand.NewPCG(c.seed, c.seed))
	now := time.Now().UTC()
	start := now.AddDate(0, 0, -c.days)

	hash, err := bcrypt.GenerateFromPassword([]byte(c.password), bcrypt.MinCost)
	if err != nil {
		return err
	}
	_, admin, err := store.CreateOrganizationWithOwner(ctx, "Seed operators", "premium", "seed-admin@example.com", string(hash), models.RoleAdmin)
	if err != nil {
		return err
	}
	book, err := seedPrices(ctx, store, admin.User, start, now)
	if err != nil {
		return err
	}
	began := time.Now()
	tokens, err := seedOrganizations(ctx, store, c.orgs, string(hash), rnd)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d organizations and %d tokens in %s\n", c.orgs, len(tokens), time.Since(began).Round(time.Millisecond))

	began = time.Now()
	if err := seedEvents(ctx, store, book, tokens, c, start, now); err != nil {
		return err
	}
	took := time.Since(began)
	fmt.Fprintf(out, "%d usage events over %d days in %s (%.0f events/s, rollups kept)\n",
		c.events, c.days, took.Round(time.Millisecond), float64(c.events)/took.Seconds())
	if err := seedRejections(ctx, store, tokens, c.days, now, rnd); err != nil {
		return err
	}
	fmt.Fprintf(out, "admin: seed-admin@example.com / %s\nbusiest owner: owner0@seed.example / %s\n", c.password, c.password)
	return nil
}

// seedModels are the models the events use, with their prices; gpt-4o's
// price changes half-way, so invoices show two lines for it.
var seedModels = []struct {
	name                  string
	in, out, cached, next string
}{
	{"gpt-4o-mini", "0.15", "0.60", "0.075", ""},
	{"gpt-4o", "2.50", "10.00", "1.25", "2.00"},
	{"claude-haiku", "0.80", "4.00", "0.08", ""},
	{"sluice-local", "0.01", "0.02", "0.01", ""},
}

func seedPrices(ctx context.Context, store *models.Store, admin models.User, start, now time.Time) (*metering.PriceBook, error) {
	for _, m := range seedModels {
		if _, err := setPrice(ctx, store, admin, m.name, m.in, m.out, m.cached, start); err != nil {
			return nil, err
		}
		if m.next != "" {
			if _, err := setPrice(ctx, store, admin, m.name, m.next, m.out, m.cached, start.Add(now.Sub(start)/2)); err != nil {
				return nil, err
			}
		}
	}
	book := metering.NewPriceBook()
	return book, book.Load(ctx, store)
}

func setPrice(ctx context.Context, store *models.Store, admin models.User, model, in, out, cached string, at time.Time) (models.ModelPrice, error) {
	var p models.ModelPrice
	var err error
	for _, f := range []struct {
		s   string
		dst *money.Price
	}{{in, &p.InputPerMTok}, {out, &p.OutputPerMTok}, {cached, &p.CachedInputPerMTok}} {
		if *f.dst, err = money.ParsePrice(f.s); err != nil {
			return p, err
		}
	}
	p.Model = model
	return store.SetModelPrice(ctx, admin, p, at)
}

// token is one API token and how much of the traffic it carries.
type token struct {
	org, id int64
	weight  float64
}

// seedOrganizations makes orgs organizations (one in ten on premium), each
// with an owner and one to three tokens. Traffic is skewed as in life: the
// first organizations are the busiest (weights fall off as 1/rank).
func seedOrganizations(ctx context.Context, store *models.Store, orgs int, hash string, rnd *rand.Rand) ([]token, error) {
	var tokens []token
	for i := range orgs {
		tier := "free"
		if i%10 == 0 {
			tier = "premium"
		}
		o, u, err := store.CreateOrganizationWithOwner(ctx, fmt.Sprintf("Seed org %04d", i), tier, fmt.Sprintf("owner%d@seed.example", i), hash, models.RoleOwner)
		if err != nil {
			return nil, err
		}
		for j := range 1 + rnd.IntN(3) {
			t, _, err := store.CreateAPIToken(ctx, o.ID, u.ID, "key "+strconv.Itoa(j), nil)
			if err != nil {
				return nil, err
			}
			tokens = append(tokens, token{org: o.ID, id: t.ID, weight: 1 / float64(i+1)})
		}
	}
	return tokens, nil
}

// seedEvents stores c.events events spread evenly over [start, now), each
// priced as the pipeline would at its time, in batches from c.workers
// concurrent inserters.
func seedEvents(ctx context.Context, store *models.Store, book *metering.PriceBook, tokens []token, c config, start, now time.Time) error {
	// Cumulative weights, to pick a token by its share of traffic.
	cum := make([]float64, len(tokens))
	total := 0.0
	for i, t := range tokens {
		total += t.weight
		cum[i] = total
	}
	span := now.Sub(start)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c.workers)
	for w := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(c.seed, uint64(w)+1))
			batch := make([]models.UsageEvent, 0, c.batch)
			for {
				first := next.Add(int64(c.batch)) - int64(c.batch)
				if first >= int64(c.events) || ctx.Err() != nil {
					return
				}
				batch = batch[:0]
				for i := first; i < min(first+int64(c.batch), int64(c.events)); i++ {
					at := start.Add(time.Duration(float64(span) * float64(i) / float64(c.events)))
					t := tokens[pick(cum, rnd.Float64()*total)]
					m := seedModels[rnd.IntN(len(seedModels))].name
					u := chat.Usage{PromptTokens: 50 + rnd.IntN(2000), CompletionTokens: 10 + rnd.IntN(800)}
					u.CachedTokens = u.PromptTokens * rnd.IntN(3) / 4
					ev := models.UsageEvent{RequestID: "seed" + strconv.FormatInt(i, 36), OrgID: t.org, TokenID: t.id, Model: m,
						PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens,
						Status: 200, LatencyMs: 50 + rnd.IntN(900), CreatedAt: at}
					if p, ok := book.At(m, at); ok {
						ev.Cost, ev.PriceID = metering.Cost(p, u), p.ID
					}
					batch = append(batch, ev)
				}
				if err := store.InsertUsageEvents(ctx, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}

// seedRejections adds a day's worth of rejected requests, by reason, for
// the first token of every tenth organization, so the charts and the 429
// rates have something to show.
func seedRejections(ctx context.Context, store *models.Store, tokens []token, days int, now time.Time, rnd *rand.Rand) error {
	var rs []models.Rejections
	seen := map[int64]bool{}
	for _, t := range tokens {
		if seen[t.org] || t.org%10 != 0 {
			continue
		}
		seen[t.org] = true
		for d := range days {
			rs = append(rs, models.Rejections{OrgID: t.org, TokenID: t.id, Model: "gpt-4o-mini",
				Hour: now.AddDate(0, 0, -d).Truncate(time.Hour), Requests: int64(rnd.IntN(50)), Tokens: int64(rnd.IntN(10)),
				Budget: int64(rnd.IntN(3))})
		}
	}
	return store.AddRejections(ctx, rs)
}

// pick is the index of the first cumulative weight above x.
func pick(cum []float64, x float64) int {
	lo, hi := 0, len(cum)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if cum[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
