package handlers

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/upstream/mock"
)

// aliasRig is a gateway with two providers: the generation env's mock,
// which answers, and one whose every answer is a 500, so a key on it is
// down. Its organization's tier limits nothing but money.
type aliasRig struct {
	*genEnv
	db      *models.DB
	downURL string
	down    *mock.Server
	admin   string // an admin's session
	owner   string // the organization's owner's session
	key     string // its API token
}

func newAliasRig(t *testing.T, db *models.DB) *aliasRig {
	g := newGenEnv(t, db)
	down := mock.New(mock.Config{Keys: map[string]float64{"sk-down-key": 0}, FailureRate: 1})
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	r := &aliasRig{genEnv: g, db: db, downURL: srv.URL + "/v1", down: down, admin: g.login("admin@example.com", "admin-password")}
	r.put(t, "/api/admin/tiers/free", `{"tokens_per_minute":0,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`)
	r.owner = g.signup("a@example.com", "A")
	r.key, _ = g.apiToken(r.owner)
	return r
}

func (r *aliasRig) put(t *testing.T, path, body string) {
	t.Helper()
	if w := r.do(request{method: "PUT", path: path, bearer: r.admin, body: body}); w.Code != 200 {
		t.Fatalf("PUT %s: %d %s", path, w.Code, w.Body.String())
	}
}

// keyFor adds a provider key serving models on baseURL.
func (r *aliasRig) keyFor(t *testing.T, name, baseURL, secret string, models ...string) {
	t.Helper()
	ms, _ := json.Marshal(models)
	w := r.do(request{method: "POST", path: "/api/admin/upstreams", bearer: r.admin,
		body: `{"name":"` + name + `","base_url":"` + baseURL + `","api_key":"` + secret + `","models":` + string(ms) + `}`})
	if w.Code != 201 {
		t.Fatalf("add key %s: %d %s", name, w.Code, w.Body.String())
	}
}

func (r *aliasRig) alias(t *testing.T, body string) {
	t.Helper()
	if w := r.do(request{method: "POST", path: "/api/admin/aliases", bearer: r.admin, body: body}); w.Code != 201 {
		t.Fatalf("create alias: %d %s", w.Code, w.Body.String())
	}
}

func (r *aliasRig) chatModel(model, extra string) *httptest.ResponseRecorder {
	return r.do(request{method: "POST", path: "/v1/chat/completions", bearer: r.key,
		body: `{"model":"` + model + `","messages":[{"role":"user","content":"tell me about rivers"}]` + extra + `}`})
}

// events are the usage events, in no order; with requestID, that
// request's.
func (r *aliasRig) events(t *testing.T, requestID ...string) []models.UsageEvent {
	t.Helper()
	var evs []models.UsageEvent
	q := r.db.Gorm
	if len(requestID) > 0 {
		q = q.Where("request_id IN ?", requestID)
	}
	if err := q.Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	return evs
}

// price is model's price in force now, from the pipeline's price book.
func (r *aliasRig) price(t *testing.T, model string) models.ModelPrice {
	t.Helper()
	p, ok := r.pipe.Prices.At(model, r.clock.Now())
	if !ok {
		t.Fatalf("%s has no price", model)
	}
	return p
}

// usageOf is what an event bills.
func billedUsage(ev models.UsageEvent) chat.Usage {
	return chat.Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens, CachedTokens: ev.CachedTokens,
		CacheCreationTokens: ev.CacheCreationTokens, ReasoningTokens: ev.ReasoningTokens}
}

// servedModel is the model the mock was asked for, which it echoes.
func servedModel(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct{ Model string }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer %d %q", w.Code, w.Body.String())
	}
	return body.Model
}

// TestAliasWeightsAreHonoured: with the draws injected, 100 requests to a
// 70/30 alias go 70 to one target and 30 to the other, each answered with
// its model named in X-Sluice-Model and in the body the provider got, and
// each metered and priced as the model that answered.
func TestAliasWeightsAreHonoured(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		var draws atomic.Int64
		r.pipe.Rand = func() float64 { return (float64((draws.Add(1)-1)%100) + 0.5) / 100 }
		r.rebuild()
		r.keyFor(t, "openai", r.mockURL, "sk-mock-key", "gpt-4o-mini", "claude-3-5-haiku")
		r.put(t, "/api/admin/prices/gpt-4o-mini", `{"input_per_mtok":"1","output_per_mtok":"10"}`)
		r.put(t, "/api/admin/prices/claude-3-5-haiku", `{"input_per_mtok":"3","output_per_mtok":"15"}`)
		r.alias(t, `{"name":"fast","targets":[{"model":"gpt-4o-mini","weight":70},{"model":"claude-3-5-haiku","weight":30}]}`)

		served := map[string]int{}
		for range 100 {
			w := r.chatModel("fast", "")
			if w.Code != 200 {
				t.Fatalf("chat: %d %s", w.Code, w.Body.String())
			}
			m := w.Header().Get("X-Sluice-Model")
			if got := servedModel(t, w); got != m {
				t.Fatalf("X-Sluice-Model %q, but the provider was asked for %q", m, got)
			}
			served[m]++
		}
		if served["gpt-4o-mini"] != 70 || served["claude-3-5-haiku"] != 30 || len(served) != 2 {
			t.Fatalf("served %v, want 70 gpt-4o-mini and 30 claude-3-5-haiku", served)
		}
		metered := map[string]int{}
		for _, ev := range r.events(t) {
			metered[ev.Model]++
			want := metering.Cost(r.price(t, ev.Model), billedUsage(ev))
			if ev.Cost != want || ev.Cost == 0 {
				t.Fatalf("event %s for %s cost %s, want %s at its own price", ev.RequestID, ev.Model, ev.Cost, want)
			}
		}
		if metered["gpt-4o-mini"] != 70 || metered["claude-3-5-haiku"] != 30 {
			t.Fatalf("metered %v", metered)
		}
	})
}

// TestAliasFallsBack: when the chosen model's only key is down, the
// alias's fallback answers, is named in X-Sluice-Model and is the model
// in the body the provider got, and the usage is metered and priced as
// it; a fallback whose target has lost its key (no key serves it) is
// reached the same way; when every model fails, the tier's local
// fallback answers, or its 503 names the models asked.
func TestAliasFallsBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		r.keyFor(t, "down", r.downURL, "sk-down-key", "gpt-4o-mini")
		r.keyFor(t, "up", r.mockURL, "sk-mock-key", "gpt-4o")
		r.keyFor(t, "gone", r.mockURL, "sk-mock-key", "claude-3-5-haiku")
		r.put(t, "/api/admin/prices/gpt-4o-mini", `{"input_per_mtok":"1","output_per_mtok":"10"}`)
		r.put(t, "/api/admin/prices/gpt-4o", `{"input_per_mtok":"10","output_per_mtok":"40"}`)
		r.alias(t, `{"name":"fast","targets":[{"model":"gpt-4o-mini","weight":1}],"fallbacks":["gpt-4o"]}`)
		r.alias(t, `{"name":"solo","targets":[{"model":"claude-3-5-haiku"}],"fallbacks":["gpt-4o"]}`)

		w := r.chatModel("fast", "")
		if w.Code != 200 || w.Header().Get("X-Sluice-Model") != "gpt-4o" || servedModel(t, w) != "gpt-4o" || w.Header().Get("X-Sluice-Fallback") != "" {
			t.Fatalf("fast: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		if r.down.Stats().Total.Requests == 0 {
			t.Fatal("the chosen model's key was never asked")
		}
		evs := r.events(t)
		if len(evs) != 1 || evs[0].Model != "gpt-4o" || evs[0].Cost != metering.Cost(r.price(t, "gpt-4o"), billedUsage(evs[0])) || evs[0].Cost == 0 {
			t.Fatalf("usage %+v, want one event for gpt-4o at its price", evs)
		}

		// No key serves claude-3-5-haiku any more: ErrNoKey, then gpt-4o.
		ks, _ := r.store.UpstreamKeys(context.Background())
		for _, k := range ks {
			if k.Name == "gone" {
				if w := r.do(request{method: "DELETE", path: "/api/admin/upstreams/" + itoa(k.ID), bearer: r.admin}); w.Code != 200 {
					t.Fatalf("delete key: %d", w.Code)
				}
			}
		}
		if w := r.chatModel("solo", ""); w.Code != 200 || w.Header().Get("X-Sluice-Model") != "gpt-4o" {
			t.Fatalf("solo: %d %v %s", w.Code, w.Header(), w.Body.String())
		}

		// Every model of the alias down: the tier falls back to sluice-local.
		r.alias(t, `{"name":"doomed","targets":[{"model":"gpt-4o-mini"}]}`)
		w = r.chatModel("doomed", "")
		if w.Code != 200 || w.Header().Get("X-Sluice-Fallback") != "local" || w.Header().Get("X-Sluice-Model") != "sluice-local" {
			t.Fatalf("doomed on a tier that falls back: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		r.put(t, "/api/admin/tiers/free", `{"upstream_fallback":"error"}`)
		w = r.chatModel("doomed", "")
		if w.Code != 503 || errorCode(t, w) != "upstream_unavailable" ||
			!strings.Contains(w.Body.String(), "every provider for 'doomed' is unavailable right now (asked in turn: gpt-4o-mini); retry later") ||
			w.Header().Get("X-Sluice-Model") != "" {
			t.Fatalf("doomed on a tier that does not fall back: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
	})
}

// TestAliasReservationIsAnUpperBound: an alias is reserved at the highest
// price among its models, so a hard budget that covers its cheap target
// but not its pricier fallback refuses the request before any provider
// is asked; with room for the fallback, the reservation is settled at
// the cost of the model that answered, and the budget is never overspent.
func TestAliasReservationIsAnUpperBound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		r.keyFor(t, "down", r.downURL, "sk-down-key", "gpt-4o-mini")
		r.keyFor(t, "up", r.mockURL, "sk-mock-key", "gpt-4o")
		r.put(t, "/api/admin/prices/gpt-4o-mini", `{"input_per_mtok":"1","output_per_mtok":"10"}`)
		r.put(t, "/api/admin/prices/gpt-4o", `{"input_per_mtok":"10","output_per_mtok":"40"}`)
		r.alias(t, `{"name":"fast","targets":[{"model":"gpt-4o-mini"}],"fallbacks":["gpt-4o"]}`)
		// 1,000 completion tokens: at most $0.01 and a little on
		// gpt-4o-mini, $0.04 and a little on gpt-4o.
		setBudget(t, r.genEnv, r.owner, "0.02")
		w := r.chatModel("fast", `,"max_tokens":1000`)
		if w.Code != 429 || errorCode(t, w) != "insufficient_quota" ||
			!strings.Contains(w.Body.String(), "1000 completion tokens, at the highest price among the models that may answer 'fast'), more than is left of") {
			t.Fatalf("over the budget at gpt-4o's price: %d %s", w.Code, w.Body.String())
		}
		if n := r.down.Stats().Total.Requests + r.mock.Stats().Total.Requests; n != 0 {
			t.Fatalf("a refused request reached the providers %d times", n)
		}
		// The same request to the cheap model alone fits the budget.
		r.keyFor(t, "mini", r.mockURL, "sk-mock-key", "gpt-4o-mini")
		if w := r.chatModel("gpt-4o-mini", `,"max_tokens":1000`); w.Code != 200 {
			t.Fatalf("direct to gpt-4o-mini: %d %s", w.Code, w.Body.String())
		}
		cheap := spent(t, r.genEnv, r.owner)

		// Room for gpt-4o: the alias's target is down (only the down key
		// serves it once "mini" is gone), gpt-4o answers, and the
		// reservation settles at gpt-4o's real cost.
		ks, _ := r.store.UpstreamKeys(context.Background())
		for _, k := range ks {
			if k.Name == "mini" {
				r.do(request{method: "DELETE", path: "/api/admin/upstreams/" + itoa(k.ID), bearer: r.admin})
			}
		}
		setBudget(t, r.genEnv, r.owner, "0.10")
		w = r.chatModel("fast", `,"max_tokens":1000`)
		if w.Code != 200 || w.Header().Get("X-Sluice-Model") != "gpt-4o" {
			t.Fatalf("fast with room: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		evs := r.events(t, w.Header().Get("X-Request-Id"))
		if len(evs) != 1 {
			t.Fatalf("events of the request: %+v", evs)
		}
		want := metering.Cost(r.price(t, "gpt-4o"), billedUsage(evs[0]))
		if evs[0].Model != "gpt-4o" || evs[0].Cost != want {
			t.Fatalf("event %+v, want gpt-4o costing %s", evs[0], want)
		}
		if got := spent(t, r.genEnv, r.owner); got != cheap+want || got > dollars(t, "0.10") {
			t.Fatalf("spent %s, want %s + %s (nothing left reserved, nothing over the budget)", got, cheap, want)
		}
	})
}

// TestAliasesReachEveryNode: two gateways on one database, each telling
// the other of its changes as the cluster bus does: an alias created,
// changed or deleted on one is in force on the other at once, without a
// request reading the database for it.
func TestAliasesReachEveryNode(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		a, b := newEnv(t, db), newEnv(t, db)
		a.useAliasBus(busTo(b))
		b.useAliasBus(busTo(a))
		admin := a.login("admin@example.com", "admin-password")
		key, _ := a.apiToken(a.signup("a@example.com", "A"))
		body := `{"model":"fast","messages":[{"role":"user","content":"春联"}]}`
		chat := func(e *env) *httptest.ResponseRecorder {
			return e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: body})
		}
		if w := chat(b); w.Code != 404 || errorCode(t, w) != "model_not_found" {
			t.Fatalf("before the alias: %d %s", w.Code, w.Body.String())
		}
		if w := a.do(request{method: "POST", path: "/api/admin/aliases", bearer: admin,
			body: `{"name":"fast","targets":[{"model":"sluice-local"}]}`}); w.Code != 201 {
			t.Fatalf("create on a: %d %s", w.Code, w.Body.String())
		}
		if w := chat(b); w.Code != 200 || w.Header().Get("X-Sluice-Model") != "sluice-local" {
			t.Fatalf("on b after the create: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		w := b.do(request{method: "GET", path: "/v1/models", bearer: key})
		if !strings.Contains(w.Body.String(), `{"id":"fast","object":"model","created":1767225600,"owned_by":"sluice"}`) {
			t.Fatalf("b's /v1/models: %s", w.Body.String())
		}
		// Changed on b, seen on a.
		if w := b.do(request{method: "PUT", path: "/api/admin/aliases/fast", bearer: admin, body: `{"fallbacks":["sluice-local"]}`}); w.Code != 200 {
			t.Fatalf("update on b: %d %s", w.Code, w.Body.String())
		}
		if al, ok := a.aliases.Alias("fast"); !ok || len(al.Fallbacks) != 1 {
			t.Fatalf("a's table after b's update: %+v", al)
		}
		if w := a.do(request{method: "DELETE", path: "/api/admin/aliases/fast", bearer: admin}); w.Code != 200 {
			t.Fatalf("delete on a: %d %s", w.Code, w.Body.String())
		}
		if w := chat(b); w.Code != 404 || errorCode(t, w) != "model_not_found" {
			t.Fatalf("on b after the delete: %d %s", w.Code, w.Body.String())
		}
	})
}

// busFunc is a cluster bus that hands each event to a function.
type busFunc func(context.Context, cluster.Event) error

func (f busFunc) Publish(ctx context.Context, e cluster.Event) error { return f(ctx, e) }

// busTo is the bus to the node e, applying alias events as app's applier
// does.
func busTo(e *env) cluster.Bus {
	return busFunc(func(ctx context.Context, ev cluster.Event) error {
		if ev.Kind == cluster.AliasesChanged {
			return e.aliases.Reload(ctx)
		}
		return nil
	})
}

// useAliasBus gives the env an alias service that publishes on bus.
func (e *env) useAliasBus(bus cluster.Bus) {
	e.aliases = providers.NewAliases(e.store, bus, e.log)
	if err := e.aliases.Reload(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.pipe.Aliases, e.deps.Aliases = e.aliases, e.aliases
	e.rebuild()
}

// TestAliasesAdminAPI: the alias API takes admins only, says what is wrong
// with a refused alias in words naming the field, keeps omitted fields on
// update, refuses a rename, and audits every change.
func TestAliasesAdminAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		r.keyFor(t, "openai", r.mockURL, "sk-mock-key", "gpt-4o-mini", "gpt-4o")
		tests := []struct {
			name, method, path, bearer, body string
			status                           int
			code, msg                        string
		}{
			{"a member", "POST", "/api/admin/aliases", r.owner, `{}`, 403, "forbidden", "this endpoint is for admins"},
			{"not JSON", "POST", "/api/admin/aliases", r.admin, `{"name":`, 400, "invalid_json", "request body is not valid JSON for this endpoint"},
			{"an unknown field", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","model":"x"}`, 400, "invalid_json", `unknown field "model"`},
			{"a weight as a string", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","targets":[{"model":"gpt-4o","weight":"70"}]}`,
				400, "invalid_json", "field 'targets.weight' must be int"},
			{"no name", "POST", "/api/admin/aliases", r.admin, `{"targets":[{"model":"gpt-4o"}]}`, 422, "invalid_alias",
				"name must be 1 to 100 letters, digits or . _ - : @ +, starting with a letter or digit (e.g. fast)"},
			{"no targets", "POST", "/api/admin/aliases", r.admin, `{"name":"fast"}`, 422, "invalid_alias", "targets must name at least one model"},
			{"weight 0", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","targets":[{"model":"gpt-4o","weight":0}]}`, 422, "invalid_alias",
				"the weight of targets[0] (gpt-4o) must be a whole number from 1 to 1000"},
			{"a model nobody serves", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","targets":[{"model":"gpt-5"}]}`, 422, "unknown_model",
				"targets[0] 'gpt-5' is not a model any provider key serves; add a key that serves it first, or route to sluice-local"},
			{"a served model's name", "POST", "/api/admin/aliases", r.admin, `{"name":"gpt-4o","targets":[{"model":"gpt-4o-mini"}]}`, 409, "alias_conflict",
				"'gpt-4o' is a model a provider key serves; an alias needs a name of its own"},
			{"created", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","targets":[{"model":"gpt-4o-mini","weight":70},{"model":"gpt-4o","weight":30}]}`,
				201, "", `"targets":[{"model":"gpt-4o-mini","weight":70},{"model":"gpt-4o","weight":30}],"fallbacks":[]`},
			{"taken", "POST", "/api/admin/aliases", r.admin, `{"name":"fast","targets":[{"model":"gpt-4o"}]}`, 409, "conflict", "alias fast already exists"},
			{"an alias of an alias", "POST", "/api/admin/aliases", r.admin, `{"name":"quick","targets":[{"model":"fast"}]}`, 422, "alias_of_alias",
				"targets[0] 'fast' is an alias; an alias routes to models only"},
			{"listed", "GET", "/api/admin/aliases", r.admin, "", 200, "", `"name":"fast"`},
			{"fallbacks set, targets kept", "PUT", "/api/admin/aliases/fast", r.admin, `{"fallbacks":["sluice-local"]}`, 200, "",
				`"targets":[{"model":"gpt-4o-mini","weight":70},{"model":"gpt-4o","weight":30}],"fallbacks":["sluice-local"]`},
			{"a rename", "PUT", "/api/admin/aliases/fast", r.admin, `{"name":"quick"}`, 422, "invalid_alias",
				"an alias cannot be renamed: clients call it by its name; create 'quick' and delete 'fast' instead"},
			{"an update refused", "PUT", "/api/admin/aliases/fast", r.admin, `{"targets":[]}`, 422, "invalid_alias", "targets must name at least one model"},
			{"a missing alias", "PUT", "/api/admin/aliases/slow", r.admin, `{"fallbacks":[]}`, 404, "not_found", "alias slow not found"},
			{"deleted", "DELETE", "/api/admin/aliases/fast", r.admin, "", 200, "", `{"deleted":true,"name":"fast"}`},
			{"deleted twice", "DELETE", "/api/admin/aliases/fast", r.admin, "", 404, "not_found", "alias fast not found"},
		}
		for _, tt := range tests {
			w := r.do(request{method: tt.method, path: tt.path, bearer: tt.bearer, body: tt.body})
			if w.Code != tt.status {
				t.Fatalf("%s: %d %s, want %d", tt.name, w.Code, w.Body.String(), tt.status)
			}
			if tt.code == "" {
				if !strings.Contains(w.Body.String(), tt.msg) {
					t.Fatalf("%s: %s, want it to contain %s", tt.name, w.Body.String(), tt.msg)
				}
				continue
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
				t.Fatalf("%s: %s, want code %s and a message containing %q", tt.name, w.Body.String(), tt.code, tt.msg)
			}
		}
		w := r.do(request{method: "GET", path: "/api/admin/audit?action=alias.", bearer: r.admin})
		for _, want := range []string{`"action":"alias.create"`, `"action":"alias.update"`, `"action":"alias.delete"`, `"actor_email":"admin@example.com"`} {
			if !strings.Contains(w.Body.String(), want) {
				t.Fatalf("audit log %s lacks %s", w.Body.String(), want)
			}
		}
	})
}
