// Package testredis connects tests to the real Redis named by
// TEST_REDIS_URL, or skips them saying why.
package testredis

import (
	"crypto/rand"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Client returns a client for TEST_REDIS_URL, closed when the test ends, or
// skips the test when the variable is unset.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs a real Redis (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("TEST_REDIS_URL is set but Redis does not answer: %v", err)
	}
	return c
}

// Prefix is a key prefix of the test's own, so parallel runs against one
// Redis never share a key.
func Prefix() string { return "test:" + rand.Text()[:12] + ":" }

// URL returns TEST_REDIS_URL, for a test that starts Sluice on it, or skips
// the test when the variable is unset.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs a real Redis (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	return url
}
