package web_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// TestRenderErrorHidesOnlyInternalMessages checks the error page policy:
// every coded error shows its own message with its status; an internal
// error, or an error of no code at all, shows a generic sentence and is
// logged with its detail instead.
func TestRenderErrorHidesOnlyInternalMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		status  int
		message string
		secret  string // detail that must be logged but never shown; "" if nothing is logged
	}{
		{name: "unavailable", err: apperr.New(apperr.Unavailable, "Providers are unreachable right now; try again in a minute."),
			status: 503, message: "Providers are unreachable right now; try again in a minute."},
		{name: "unavailable wrapped", err: fmt.Errorf("load usage: %w", apperr.New(apperr.Unavailable, "Usage is being recounted.")),
			status: 503, message: "Usage is being recounted."},
		{name: "bad upstream", err: apperr.New(apperr.BadUpstream, "The provider sent an answer Sluice could not read."),
			status: 502, message: "The provider sent an answer Sluice could not read."},
		{name: "not found", err: apperr.New(apperr.NotFound, "No such token."), status: 404, message: "No such token."},
		{name: "forbidden", err: apperr.New(apperr.Forbidden, "This page is for Sluice admins."), status: 403, message: "This page is for Sluice admins."},
		{name: "rate limited", err: apperr.New(apperr.RateLimited, "Slow down."), status: 429, message: "Slow down."},
		{name: "internal", err: apperr.Wrap(errors.New("dial tcp 10.0.0.7:5432: connection refused"), "load usage"),
			status: 500, message: genericError, secret: "10.0.0.7:5432"},
		{name: "internal with a message", err: apperr.New(apperr.Internal, "tier cache out of step for org 42"),
			status: 500, message: genericError, secret: "tier cache out of step for org 42"},
		{name: "no code", err: errors.New("pq: password authentication failed for user sluice"),
			status: 500, message: genericError, secret: "password authentication failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs testsync.Buffer
			rec := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(rec)
			c.Request = httptest.NewRequest(http.MethodGet, "/dashboard", nil)

			web.RenderError(c, slog.New(slog.NewTextHandler(&logs, nil)), tt.err)

			w := &response{ResponseRecorder: rec, t: t}
			w.expectError(tt.status, tt.message)
			if !c.IsAborted() {
				t.Error("RenderError did not abort the handler chain")
			}
			if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control = %q, want no-store", cc)
			}
			if got, want := w.page().Find("title").Text(), fmt.Sprintf("%d %s · Sluice", tt.status, http.StatusText(tt.status)); got != want {
				t.Errorf("title = %q, want %q", got, want)
			}
			if href, _ := w.testid("error-page").Find("a").Attr("href"); href != "/" {
				t.Errorf("an anonymous visitor is sent back to %q, want /", href)
			}
			switch {
			case tt.secret == "" && logs.String() != "":
				t.Errorf("a %s error was logged: %s", apperr.CodeOf(tt.err), logs.String())
			case tt.secret != "":
				if strings.Contains(w.Body.String(), tt.secret) || strings.Contains(w.Body.String(), "internal error") {
					t.Errorf("the page shows internal detail: %s", w.Body.String())
				}
				if !strings.Contains(logs.String(), "request failed") || !strings.Contains(logs.String(), tt.secret) {
					t.Errorf("the log lacks the detail %q: %s", tt.secret, logs.String())
				}
			}
		})
	}
}

// TestDatabaseOutageShowsTheGenericErrorPage takes the real database away:
// pages that need it answer the generic 500 page, forms do not pretend the
// user made a mistake, and pages that do not need it still work.
func TestDatabaseOutageShowsTheGenericErrorPage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signedIn(s.signup("ada@example.com", "Analytical Engines"))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			do   func() *response
		}{
			{"signed-in page", func() *response { return ada.get("/dashboard") }},
			{"login form", func() *response {
				return s.anonymous().post("/login", url.Values{"email": {"ada@example.com"}, "password": {password}})
			}},
			{"signup form", func() *response {
				return s.anonymous().post("/signup", url.Values{"email": {"new@example.com"}, "password": {password}, "organization": {"New"}})
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w := tt.do()
				w.t = t
				w.expectError(http.StatusInternalServerError, genericError)
				// The page quotes the request's id, and the log line has it.
				rid := w.Header().Get("X-Request-Id")
				if got := w.testid("error-request-id").Text(); rid == "" || got != rid {
					t.Errorf("the 500 page quotes request id %q, the response's is %q", got, rid)
				}
				if !strings.Contains(s.logs.String(), "request_id="+rid) {
					t.Errorf("no log line carries request id %s: %s", rid, s.logs.String())
				}
				if w.testid("form-error").Length() != 0 {
					t.Error("an outage was shown as a mistake on the form")
				}
				if body := w.Body.String(); strings.Contains(body, "sql:") || strings.Contains(body, "closed") {
					t.Errorf("the page shows the database error: %s", body)
				}
			})
		}
		if logs := s.logs.String(); !strings.Contains(logs, "request failed") || !strings.Contains(logs, "closed") {
			t.Errorf("the outage is not logged with its cause: %s", logs)
		}
		s.anonymous().get("/login").expectPage(http.StatusOK, "login-form")
	})
}
