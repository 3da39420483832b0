package handlers

import (
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
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

// accessLog logs each request at debug level (server errors are logged with
// their cause where they happen). Headers are never logged: they carry keys.
func accessLog(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		if log.Enabled(c, slog.LevelDebug) {
			log.Debug("request", "request_id", requestID(c), "method", c.Request.Method, "route", c.FullPath(),
				"status", c.Writer.Status(), "duration", time.Since(start))
		}
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
