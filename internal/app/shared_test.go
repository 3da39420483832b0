package app

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/quota"
)

// limiterConfig is a node's configuration against redisURL, with the
// limiter's defaults unless the test changes them.
func limiterConfig(redisURL string) config.Config {
	return config.Config{RedisURL: redisURL, RedisPrefix: "t" + rand.Text() + ":", RedisTimeout: 100 * time.Millisecond,
		LimiterTimeout: 500 * time.Millisecond, MaxConcurrency: 40, ExpectedNodes: 3, TuneInterval: time.Second, NodeID: "n1"}
}

func startShared(t *testing.T, cfg config.Config) *shared {
	t.Helper()
	adm, err := newShared(cfg, nil, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.close)
	return adm
}

// TestLimiterPoolIsReadyBeforeLoad: the limiter has its own pool, sized for
// SLUICE_MAX_CONCURRENCY (no admission waits for another's connection),
// with connections open and handshaken and the scripts loaded before the
// node serves, so the first burst of admissions neither dials nor falls back
// to EVAL.
func TestLimiterPoolIsReadyBeforeLoad(t *testing.T) {
	srv := testredis.Start(t) // fresh: no script cached, no connection open
	adm := startShared(t, limiterConfig(srv.URL()))
	lc := adm.limiterRedis
	if lc == adm.redis {
		t.Fatal("the limiter shares the cache's client")
	}
	if got := lc.Options().PoolSize; got != 40 {
		t.Fatalf("pool size %d, want SLUICE_MAX_CONCURRENCY (40)", got)
	}
	if st := lc.PoolStats(); st.IdleConns < limiterWarmConns {
		t.Fatalf("%d idle connections before any request, want %d", st.IdleConns, limiterWarmConns)
	}
	misses := lc.PoolStats().Misses
	for range 10 {
		if d, err := adm.limiter.Allow(context.Background(), "tok:1", quota.Params{Capacity: 100, RefillPerSec: 100}, 1); err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v, %v", d, err)
		}
	}
	if got := lc.PoolStats().Misses - misses; got != 0 {
		t.Fatalf("%d admissions had to dial", got)
	}
	info, err := lc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// allow, adjust, and the node's own copy of adjust for give-backs.
	loaded := strings.Contains(info, "cmdstat_script|load:calls=3") || strings.Contains(info, "cmdstat_script:calls=3") // Redis 7, 6
	if strings.Contains(info, "cmdstat_eval:") || !loaded {
		t.Fatalf("scripts not loaded before the first call:\n%s", info)
	}
	if got := adm.status().Mode; got != "shared" {
		t.Fatalf("mode %q, want shared", got)
	}
}

// TestLimiterStartsLocalWithoutRedis: a node whose Redis is unreachable at
// start (refused, or frozen and silent) serves on local limits from its
// first request, after a warm-up bounded by a few limiter budgets, instead
// of making its first requests wait to find out.
func TestLimiterStartsLocalWithoutRedis(t *testing.T) {
	testredis.URL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "redis://" + ln.Addr().String() + "/0"
	ln.Close()
	frozen := testredis.Start(t)
	frozen.Stop(t)
	for name, url := range map[string]string{"refused": refused, "frozen": frozen.URL()} {
		t.Run(name, func(t *testing.T) {
			cfg := limiterConfig(url)
			cfg.LimiterTimeout = 50 * time.Millisecond
			start := time.Now()
			adm := startShared(t, cfg)
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("start took %v", took)
			}
			if got := adm.status().Mode; got != "degraded" {
				t.Fatalf("mode %q, want degraded", got)
			}
			start = time.Now()
			if d, err := adm.limiter.Allow(context.Background(), "tok:1", quota.Params{Capacity: 30, RefillPerSec: 1}, 1); err != nil || !d.Allowed || d.Limit != 10 {
				t.Fatalf("Allow: %+v, %v; want admitted from the local share of 10", d, err)
			}
			if took := time.Since(start); took > 25*time.Millisecond {
				t.Fatalf("the first request took %v", took)
			}
		})
	}
}

// TestTheOutageShareCountsTheNodesSeen: three nodes on one Redis, each
// configured to expect one, size their share of an outage by the three
// they see; one that stops is counted out at the others' next beat.
func TestTheOutageShareCountsTheNodesSeen(t *testing.T) {
	url := testredis.URL(t)
	cfg := limiterConfig(url)
	cfg.ExpectedNodes = 1
	var nodes []*shared
	for _, id := range []string{"n1", "n2", "n3"} {
		c := cfg
		c.NodeID = id
		nodes = append(nodes, startShared(t, c))
	}
	beat := func(n *shared) {
		t.Helper()
		count, err := n.presence.Beat(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n.observeNodes(count)
	}
	if got := nodes[0].status().Nodes; got != 1 {
		t.Fatalf("before any beat: %d nodes, want the expected 1", got)
	}
	for _, n := range nodes {
		beat(n)
	}
	beat(nodes[0])
	if got := nodes[0].status(); got.Nodes != 3 {
		t.Fatalf("status %+v, want the 3 nodes seen", got)
	}
	nodes[2].close() // stops: leaves the count
	beat(nodes[0])
	if got := nodes[0].status().Nodes; got != 2 {
		t.Fatalf("after a node stopped: %d nodes, want 2", got)
	}
}
