package handlers

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
)

// readiness answers GET /readyz for load balancers: 200 when every check
// passes, else 503 naming the failing checks (their causes go to the log,
// once per change, not to whoever asks).
func readiness(log *slog.Logger, ready func(context.Context) []Check) gin.HandlerFunc {
	var mu sync.Mutex
	last := map[string]string{} // check -> last failure logged, "" when passing
	return func(c *gin.Context) {
		if ready == nil {
			c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": gin.H{}})
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		checks := ready(ctx)
		out := gin.H{}
		var failing []string
		mu.Lock()
		for _, ch := range checks {
			msg := ""
			if ch.Err != nil {
				msg = ch.Err.Error()
				failing = append(failing, ch.Name)
				out[ch.Name] = "failing"
			} else {
				out[ch.Name] = "ok"
			}
			if last[ch.Name] != msg {
				if msg != "" {
					log.Warn("readiness check failing", "check", ch.Name, "err", ch.Err)
				} else if last[ch.Name] != "" {
					log.Info("readiness check passing again", "check", ch.Name)
				}
				last[ch.Name] = msg
			}
		}
		mu.Unlock()
		if len(failing) > 0 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unready", "failing": failing, "checks": out})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": out})
	}
}

// requireBearer lets a request through only with "Authorization: Bearer
// token" (compared in constant time); an empty token lets everyone through.
func requireBearer(token string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !bearerIs(c.Request, token) {
			writeAPIError(c, slog.New(slog.DiscardHandler), errMetricsToken)
			return
		}
		c.Next()
	}
}

var errMetricsToken = apperr.WithReason(apperr.Unauthorized, "metrics_token_required",
	"send the metrics bearer token (SLUICE_METRICS_TOKEN) as 'Authorization: Bearer …'")

// bearerIs says whether r bears token (always, when token is empty),
// compared in constant time.
func bearerIs(r *http.Request, token string) bool {
	return token == "" || subtle.ConstantTimeCompare([]byte(bearer(r)), []byte(token)) == 1
}

// MetricsOnly serves h at /metrics, behind the metrics bearer token when
// one is set: what a node serves on its own metrics address.
func MetricsOnly(token string, h http.Handler) http.Handler {
	r := gin.New()
	r.GET("/metrics", requireBearer(token), gin.WrapH(h))
	return r
}
