package handlers

import (
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/quota"
)

const requestIDKey = "sluice.request_id"

// withRequestID gives every request a server-made id, returned as
// X-Request-Id and used as the usage event's key. A client-sent id is not
// trusted for that: a repeated one would make two requests bill as one.
func withRequestID(c *gin.Context) {
	id := newRequestID(time.Now())
	c.Set(requestIDKey, id)
	c.Header("X-Request-Id", id)
	c.Next()
}

// sortable is base32 in ASCII order, so ids compare as their times do.
const sortable = "234567ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// newRequestID is "req_", the time in milliseconds in 10 base32 digits, and
// 80 random bits: unique, and ordered by time, so the usage table's index on
// it grows at one end instead of being split at random places.
func newRequestID(now time.Time) string {
	var b [4 + 10 + 16]byte
	copy(b[:], "req_")
	ms := uint64(now.UnixMilli())
	for i := 13; i >= 4; i-- {
		b[i] = sortable[ms&31]
		ms >>= 5
	}
	copy(b[14:], rand.Text()[:16])
	return string(b[:])
}

func requestID(c *gin.Context) string { return c.GetString(requestIDKey) }

// recoverer turns a panic into a logged internal error, in the shape the
// path's clients expect, instead of a dropped connection.
func recoverer(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				err := apperr.Wrap(panicError{v}, "panic")
				if c.Writer.Written() {
					log.Error("panic after response started", "request_id", requestID(c), "err", err)
					c.Abort()
					return
				}
				writeErrorFor(c, log, err)
			}
		}()
		c.Next()
	}
}

type panicError struct{ v any }

func (p panicError) Error() string { return "panic: " + anyString(p.v) }

func anyString(v any) string {
	switch x := v.(type) {
	case error:
		return x.Error()
	case string:
		return x
	default:
		return "non-error value"
	}
}

// Keys handlers set for the access log and the metrics.
const (
	servedKey    = "sluice.served"     // completion.Served of a chat request
	errorCodeKey = "sluice.error_code" // the code an error answer carried
)

// accessLog writes one structured line per request and records its
// metrics: request id, route, status, duration, the error code if any, and
// for API calls the token's prefix (never the token), organization, tier,
// model and provider retries. Headers and bodies are never logged: they
// carry keys and prompts.
func accessLog(log *slog.Logger, m *metrics.Gateway) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		took := time.Since(start)
		route, status := c.FullPath(), c.Writer.Status()
		var caller *accounts.Caller
		var served *completion.Served
		var tier, model string
		var provider time.Duration
		if v, ok := c.Get(callerKey); ok {
			cl := v.(accounts.Caller)
			caller, tier = &cl, cl.Tier.Name
		}
		if v, ok := c.Get(servedKey); ok {
			s := v.(completion.Served)
			served, model, provider = &s, s.Model, s.ProviderTime
		}
		m.Request(route, status, tier, model, took, provider)
		if !log.Enabled(c, slog.LevelInfo) {
			return // an operator at warn level pays nothing for the line
		}
		attrs := make([]slog.Attr, 0, 12)
		attrs = append(attrs, slog.String("request_id", requestID(c)), slog.String("method", c.Request.Method),
			slog.String("route", route), slog.Int("status", status), slog.Duration("duration", took))
		if code := c.GetString(errorCodeKey); code != "" {
			attrs = append(attrs, slog.String("error_code", code))
		}
		if caller != nil {
			attrs = append(attrs, slog.String("token", caller.TokenPrefix), slog.Int64("org_id", caller.OrgID), slog.String("tier", tier))
		}
		if served != nil {
			attrs = append(attrs, slog.String("model", model), slog.Int("retries", max(served.Attempts-1, 0)))
		}
		log.LogAttrs(c, slog.LevelInfo, "request", attrs...)
	}
}

// measureLoad feeds the auto-tuner's load signal: requests in flight and the
// latency of those that were answered.
func measureLoad(inFlight *quota.InFlight, latency *quota.LatencyWindow) gin.HandlerFunc {
	return func(c *gin.Context) {
		inFlight.Inc()
		start := time.Now()
		defer func() {
			inFlight.Dec()
			if c.Writer.Status() < 300 {
				latency.Observe(time.Since(start))
			}
		}()
		c.Next()
	}
}
