package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/teststripe"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
)

// credits is the prepaid balance as payments sees it through its
// BalanceCrediter: it keeps every call, and applies each (kind, reference)
// once, as the interface promises. It is Sluice's own interface, not a
// stand-in for Stripe.
type credits struct {
	mu      sync.Mutex
	calls   []credit
	applied map[string]money.Amount
}

type credit struct {
	OrgID           int64
	Amount          money.Amount
	Kind, Reference string
}

func (c *credits) CreditBalance(_ context.Context, orgID int64, amount money.Amount, kind, reference, _ string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, credit{orgID, amount, kind, reference})
	if c.applied == nil {
		c.applied = map[string]money.Amount{}
	}
	if _, ok := c.applied[kind+"/"+reference]; ok {
		return false, nil
	}
	c.applied[kind+"/"+reference] = amount
	return true, nil
}

func (c *credits) Calls() []credit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]credit(nil), c.calls...)
}

// stripeRequests records the form bodies Sluice sends to stripe-mock, on
// their way there: what the mock accepted, for a test to read.
type stripeRequests struct {
	mu   sync.Mutex
	seen []stripeRequest
}

type stripeRequest struct {
	Method, Path string
	Form         url.Values
	Status       int
}

func (r *stripeRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	form, _ := url.ParseQuery(string(body))
	rec := stripeRequest{Method: req.Method, Path: req.URL.Path, Form: form}
	if resp != nil {
		rec.Status = resp.StatusCode
	}
	r.mu.Lock()
	r.seen = append(r.seen, rec)
	r.mu.Unlock()
	return resp, err
}

// To lists the requests made to path, in order.
func (r *stripeRequests) To(method, pathPrefix string) []stripeRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stripeRequest
	for _, s := range r.seen {
		if s.Method == method && strings.HasPrefix(s.Path, pathPrefix) {
			out = append(out, s)
		}
	}
	return out
}

// stripeEnv is an env whose payments talk to a real stripe-mock and credit
// a recording balance; its logs are captured.
type stripeEnv struct {
	*env
	pay      *payments.Service
	credits  *credits
	requests *stripeRequests
	logs     *testsync.Buffer
}

// newStripeEnv wires payments into a fresh env over db, crediting cr, or
// with cr nil the env's own prepaid balance (billing).
func newStripeEnv(t *testing.T, db *models.DB, mock *teststripe.Mock, cr *credits) *stripeEnv {
	t.Helper()
	e := newEnv(t, db)
	logs := e.captureLogs()
	reqs := &stripeRequests{}
	sc := payments.NewClient(teststripe.SecretKey, mock.URL, &http.Client{Transport: reqs, Timeout: 10 * time.Second})
	var balance payments.BalanceCrediter = e.bill // the real balance, as the composition root wires it
	if cr != nil {
		balance = cr
	}
	pay := payments.New(payments.Config{WebhookSecret: teststripe.WebhookSecret, Currency: "usd", TopUpMin: 5 * money.Dollar, TopUpMax: 1000 * money.Dollar},
		payments.Deps{Stripe: sc, Store: e.store, Balance: balance, Orgs: e.bill, Log: slog.New(slog.NewTextHandler(logs, nil)), Now: e.clock.Now})
	e.deps.Payments = pay
	e.rebuild()
	return &stripeEnv{env: e, pay: pay, credits: cr, requests: reqs, logs: logs}
}

// deliver posts a signed event to the node's /webhooks/stripe.
func (e *stripeEnv) deliver(body []byte, header string) *httptest.ResponseRecorder {
	e.t.Helper()
	return e.do(request{method: "POST", path: "/webhooks/stripe", body: string(body), header: map[string]string{"Stripe-Signature": header}})
}

// event is a Stripe event signed now by the test clock.
func (e *stripeEnv) event(id, typ string, created time.Time, object any) ([]byte, string) {
	return teststripe.Event(e.t, teststripe.WebhookSecret, id, typ, created, object, e.clock.Now())
}

// orgID is the organization of a session token's user.
func (e *stripeEnv) orgID(session string) int64 {
	e.t.Helper()
	w := e.do(request{method: "GET", path: "/api/organizations", bearer: session})
	data := decode(e.t, w)["data"].([]any)
	return int64(data[0].(map[string]any)["id"].(float64))
}

// topUpSession is a checkout.session.completed object for a paid top-up.
func topUpSession(id string, org int64, cents int64) map[string]any {
	return map[string]any{"id": id, "object": "checkout.session", "mode": "payment", "payment_status": "paid", "status": "complete",
		"amount_total": cents, "currency": "usd", "customer": "cus_test", "metadata": map[string]string{"org_id": fmt.Sprint(org), "kind": "topup"}}
}

// httpClient is an *http.Client through the recording transport.
func httpClient(r *stripeRequests) *http.Client {
	return &http.Client{Transport: r, Timeout: 10 * time.Second}
}
