package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream/mock"
)

// TestNoSecretAtRest runs Sluice through a full day — signups, sign-ins
// (and a wrong password), API tokens (one revoked, one mistyped), provider
// keys (a good one, one the provider refuses, one that fails), a webhook
// secret, completions plain, streamed, cached, in a conversation and
// queued, sign-out — then reads every row of every table, every file in
// the data directory, every Redis key and every message on Sluice's
// channels, and every log line (at debug level), a handler's panic
// included (a provider transport with a bug): no password, API token,
// provider key, webhook signing secret or session JWT is anywhere.
func TestNoSecretAtRest(t *testing.T) {
	variants := map[string]func(t *testing.T) (map[string]string, func(t *testing.T) string){
		"sqlite": func(t *testing.T) (map[string]string, func(t *testing.T) string) {
			dir := t.TempDir()
			return map[string]string{"SLUICE_DATA_DIR": dir}, func(t *testing.T) string {
				db, err := models.Open(context.Background(), "", filepath.Join(dir, "sluice.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				return dumpTables(t, db) + dumpFiles(t, dir)
			}
		},
		"postgres": func(t *testing.T) (map[string]string, func(t *testing.T) string) {
			dsn := testdb.PostgresURL(t)
			dir := t.TempDir()
			return map[string]string{"DATABASE_URL": dsn, "SLUICE_AUTO_MIGRATE": "true", "SLUICE_MASTER_KEY": testMasterKey, "SLUICE_DATA_DIR": dir},
				func(t *testing.T) string {
					db, err := models.Open(context.Background(), dsn, "")
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					return dumpTables(t, db) + dumpFiles(t, dir)
				}
		},
	}
	for name, variant := range variants {
		t.Run(name, func(t *testing.T) {
			env, dumpDB := variant(t)
			secrets := &secretList{}
			adminPassword := secrets.add("admin password", "admin-"+rand.Text())
			env["SLUICE_ADMIN_PASSWORD"] = adminPassword
			env["SLUICE_BCRYPT_COST"] = "4"
			env["SLUICE_LOG_LEVEL"] = "debug"
			env["SLUICE_WEBHOOK_HOSTS"] = "127.0.0.1" // an httptest server on loopback, over http
			env["SLUICE_WEBHOOK_ALLOW_PRIVATE"], env["SLUICE_WEBHOOK_ALLOW_HTTP"] = "true", "true"
			env["SLUICE_UPSTREAM_BUDGET"], env["SLUICE_UPSTREAM_MAX_BACKOFF"] = "1s", "20ms"
			var rdb *redis.Client
			var published *testsync.Buffer
			if redisURL := os.Getenv("TEST_REDIS_URL"); redisURL != "" {
				prefix := "secrets" + rand.Text() + ":"
				env["REDIS_URL"], env["SLUICE_REDIS_PREFIX"] = redisURL, prefix
				rdb, published = watchRedis(t, redisURL, prefix)
			} else {
				t.Log("TEST_REDIS_URL is not set: Redis keys are not checked (CI sets it)")
			}
			dump := scenario(t, env, secrets)
			dump += dumpDB(t)
			if rdb != nil {
				dump += dumpRedis(t, rdb, env["SLUICE_REDIS_PREFIX"]) + published.String()
				secrets.show("a Redis key", "redis ")
			}
			for _, s := range secrets.all() {
				if strings.Contains(dump, s.value) {
					t.Errorf("the %s is stored or logged in plain text: %s", s.name, around(dump, s.value))
				}
			}
			for _, s := range secrets.shown {
				if !strings.Contains(dump, s.value) {
					t.Errorf("the dump lacks the %s (%q): is it complete?", s.name, s.value)
				}
			}
		})
	}
}

type secret struct{ name, value string }

// secretList collects the secrets a scenario handles, and things the dump
// must show, so an empty or partial dump cannot pass.
type secretList struct{ list, shown []secret }

// show names something that must be in the dump.
func (l *secretList) show(name, value string) { l.shown = append(l.shown, secret{name, value}) }

func (l *secretList) add(name, value string) string {
	if len(value) < 8 {
		panic("a secret too short to search for: " + name)
	}
	l.list = append(l.list, secret{name, value})
	// A JWT is a credential by its signature: search for that too.
	if parts := strings.Split(value, "."); len(parts) == 3 && len(parts[2]) >= 16 {
		l.list = append(l.list, secret{name + " (its signature)", parts[2]})
	}
	return value
}

func (l *secretList) all() []secret { return l.list }

// roundTripperFunc is a function as an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// scenario drives a Sluice started with env through everything that
// handles a secret, and returns its log.
func scenario(t *testing.T, env map[string]string, secrets *secretList) string {
	providerKey := secrets.add("provider key", "sk-provider-"+rand.Text())
	refusedKey := secrets.add("refused provider key", "sk-refused-"+rand.Text())
	failingKey := secrets.add("failing provider key", "sk-failing-"+rand.Text())
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{providerKey: 0, refusedKey + "-not": 0}, StreamChunks: 3}))
	t.Cleanup(provider.Close)
	failing := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{failingKey: 0}, FailureRate: 1}))
	t.Cleanup(failing.Close)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(hooks.Close)

	// A provider transport with a bug: it panics on one key's requests, in
	// the handler's goroutine, as a library can.
	panicKey := secrets.add("provider key whose transport panics", "sk-panic-"+rand.Text())
	transport := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Authorization") == "Bearer "+panicKey {
			panic("transport: invalid memory address or nil pointer dereference")
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	base, out, stop := startWith(t, env, app.Options{ProviderTransport: transport})
	c := client{t, base}
	expect := func(r *http.Response, status int, what string) {
		t.Helper()
		if status != 0 && r.StatusCode != status {
			t.Fatalf("%s: %d, want %d", what, r.StatusCode, status)
		}
	}
	var admin, signup, login struct{ Token string }
	expect(c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"`+env["SLUICE_ADMIN_PASSWORD"]+`"}`, &admin), 200, "admin login")
	secrets.add("admin session", admin.Token)
	for _, k := range []struct{ name, url, key, models string }{
		{"good", provider.URL + "/v1", providerKey, `["gpt-4o-mini"]`},
		{"refused", provider.URL + "/v1", refusedKey, `["gpt-refused"]`},
		{"failing", failing.URL + "/v1", failingKey, `["gpt-failing"]`},
		{"panicking", provider.URL + "/v1", panicKey, `["gpt-panic"]`},
	} {
		expect(c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"`+k.name+`","base_url":"`+k.url+`","api_key":"`+k.key+`","models":`+k.models+`}`, nil), 201, "add provider key "+k.name)
	}

	password := secrets.add("user password", "pw-"+rand.Text())
	expect(c.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"`+password+`","organization":"Analytical Engines"}`, &signup), 201, "signup")
	secrets.add("signup session", signup.Token)
	wrong := secrets.add("mistyped password", "wrong-"+rand.Text())
	expect(c.call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"`+wrong+`"}`, nil), 401, "login with a wrong password")
	expect(c.call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"`+password+`"}`, &login), 200, "login")
	secrets.add("login session", login.Token)

	var webhook struct {
		Secret string `json:"webhook_secret"`
	}
	expect(c.call("PUT", "/api/organization", login.Token, `{"webhook_url":"`+hooks.URL+`/budget"}`, &webhook), 200, "set a webhook")
	secrets.add("webhook signing secret", webhook.Secret)
	// Invitations: a code signed up through, one accepted by a signed-in
	// user (its code in the request's path), one left pending.
	invite := func(email string) string {
		t.Helper()
		var inv struct{ Code string }
		expect(c.call("POST", "/api/organization/invitations", login.Token, `{"email":"`+email+`"}`, &inv), 201, "invite "+email)
		return secrets.add("invitation code for "+email, inv.Code)
	}
	var joined, carol struct{ Token string }
	bobPassword := secrets.add("invitee's password", "pw-"+rand.Text())
	expect(c.call("POST", "/api/auth/signup", "", `{"email":"bob@example.com","password":"`+bobPassword+`","invitation":"`+invite("bob@example.com")+`"}`, &joined),
		201, "sign up through an invitation")
	secrets.add("invitee's session", joined.Token)
	carolPassword := secrets.add("second invitee's password", "pw-"+rand.Text())
	expect(c.call("POST", "/api/auth/signup", "", `{"email":"carol@example.com","password":"`+carolPassword+`","organization":"Carol's"}`, &carol), 201, "carol signs up")
	secrets.add("second invitee's session", carol.Token)
	expect(c.call("POST", "/api/invitations/"+invite("carol@example.com")+"/accept", carol.Token, "", nil), 200, "accept an invitation")
	invite("dan@example.com")
	expect(c.call("PUT", "/api/budget", login.Token, `{"monthly_limit":"0.000001","hard_stop":false}`, nil), 200, "set a budget")
	expect(c.call("PUT", "/api/admin/prices/gpt-4o-mini", admin.Token, `{"input_per_mtok":"1","output_per_mtok":"1","cached_input_per_mtok":"1"}`, nil), 200, "price")

	var tok, revoked struct {
		ID    int64
		Token string
	}
	expect(c.call("POST", "/api/tokens", login.Token, `{"name":"live"}`, &tok), 201, "token")
	expect(c.call("POST", "/api/tokens", login.Token, `{"name":"revoked"}`, &revoked), 201, "token")
	secrets.add("API token", tok.Token)
	secrets.show("token's display prefix (stored)", tok.Token[:16])
	secrets.show("user's email (stored)", "ada@example.com")
	secrets.show("provider key's last four (stored)", providerKey[len(providerKey)-4:])
	secrets.show("a request in the log", "/v1/chat/completions")
	secrets.add("revoked API token", revoked.Token)
	expect(c.call("DELETE", fmt.Sprintf("/api/tokens/%d", revoked.ID), login.Token, "", nil), 200, "revoke")
	expect(c.call("POST", "/v1/chat/completions", revoked.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil), 401, "revoked token")
	mistyped := secrets.add("mistyped API token", tok.Token[:len(tok.Token)-3]+"xyz")
	expect(c.call("POST", "/v1/chat/completions", mistyped, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil), 401, "mistyped token")

	chat := func(model, extra string, headers map[string]string, status int) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"a couplet about rivers"}]` + extra + `}`
		expect(c.callHeaders("POST", "/v1/chat/completions", tok.Token, body, headers, nil), status, "chat with "+model+extra)
	}
	chat("sluice-local", "", nil, 200)
	chat("gpt-4o-mini", `,"temperature":0`, nil, 200)
	chat("gpt-4o-mini", `,"temperature":0`, nil, 200) // from the cache
	chat("gpt-4o-mini", `,"stream":true,"stream_options":{"include_usage":true}`, nil, 200)
	chat("gpt-4o-mini", "", map[string]string{"X-Sluice-Session": "rivers"}, 200)
	chat("gpt-refused", "", nil, 0) // the tier's fallback answers, or a 503
	chat("gpt-failing", "", nil, 0)
	chat("gpt-panic", "", nil, 500) // a panic in the handler: 500, logged
	secrets.show("the handler's panic in the log", "nil pointer dereference")
	chat("sluice-local", `,"messages":7`, nil, 400)
	// A token that requires signed requests: the secret is sealed at rest
	// and never logged, with the signed, replayed and unsigned calls.
	var signedTok struct {
		ID    int64
		Token string
	}
	expect(c.call("POST", "/api/tokens", login.Token, `{"name":"signed"}`, &signedTok), 201, "token")
	secrets.add("signed API token", signedTok.Token)
	var signingOn struct {
		Secret string `json:"signing_secret"`
	}
	expect(c.call("PUT", fmt.Sprintf("/api/tokens/%d/signing", signedTok.ID), login.Token, `{"required":true}`, &signingOn), 200, "require signing")
	signingSecret := secrets.add("request signing secret", signingOn.Secret)
	signedBody := `{"model":"sluice-local","messages":[{"role":"user","content":"signed"}]}`
	ts := time.Now().Unix()
	sig := map[string]string{signing.HeaderTimestamp: strconv.FormatInt(ts, 10), signing.HeaderNonce: "once",
		signing.HeaderSignature: signing.Sign([]byte(signingSecret), "POST", "/v1/chat/completions", ts, "once", []byte(signedBody))}
	expect(c.callHeaders("POST", "/v1/chat/completions", signedTok.Token, signedBody, sig, nil), 200, "signed call")
	expect(c.callHeaders("POST", "/v1/chat/completions", signedTok.Token, signedBody, sig, nil), 401, "replayed signed call")
	expect(c.call("POST", "/v1/chat/completions", signedTok.Token, signedBody, nil), 401, "unsigned call")
	expect(c.call("POST", "/v1/jobs", tok.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"later"}]}`, nil), 202, "job")

	// The browser: sign in, a page, sign out.
	form := url.Values{"email": {"ada@example.com"}, "password": {password}}
	req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "sluice_session" {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatalf("page login: %d, no cookie", resp.StatusCode)
	}
	secrets.add("session cookie", cookie.Value)
	for _, path := range []string{"/dashboard", "/tokens", "/logout"} {
		method := "GET"
		if path == "/logout" {
			method = "POST"
		}
		req, _ := http.NewRequest(method, base+path, nil)
		req.AddCookie(cookie)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	// Stopping drains the usage recorder and the job queue into the database.
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String()
}

// dumpTables renders every row of every table of db.
func dumpTables(t *testing.T, db *models.DB) string {
	t.Helper()
	var tables []string
	q := `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`
	if db.Dialect == "postgres" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	if err := db.Gorm.Raw(q).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	if len(tables) < 10 {
		t.Fatalf("only %d tables: %v", len(tables), tables)
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := db.Gorm.Raw(`SELECT * FROM "` + table + `"`).Rows()
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			b.WriteString(table + ":")
			for i, v := range vals {
				fmt.Fprintf(&b, " %s=%s", cols[i], v)
			}
			b.WriteString("\n")
		}
		rows.Close()
	}
	return b.String()
}

// dumpFiles is every byte of every file under dir: the database's pages
// and write-ahead log hold rows that were deleted or not yet checkpointed.
func dumpFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		b.WriteString("file " + path + ":\n")
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// watchRedis connects to Redis and records every message published on
// the deployment's channels from now on.
func watchRedis(t *testing.T, redisURL, prefix string) (*redis.Client, *testsync.Buffer) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	var published testsync.Buffer
	sub := rdb.PSubscribe(context.Background(), prefix+"*")
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range sub.Channel() {
			fmt.Fprintf(&published, "published on %s: %s\n", m.Channel, m.Payload)
		}
	}()
	t.Cleanup(func() { sub.Close(); wg.Wait() })
	return rdb, &published
}

// dumpRedis renders every key under prefix with its value, whatever its type.
func dumpRedis(t *testing.T, rdb *redis.Client, prefix string) string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatalf("no Redis key under %q: is Sluice using Redis?", prefix)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		switch typ {
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "list":
			v, err = rdb.LRange(ctx, k, 0, -1).Result()
		case "set":
			v, err = rdb.SMembers(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "stream":
			v, err = rdb.XRange(ctx, k, "-", "+").Result()
		case "none":
			continue // expired since the scan
		default:
			t.Fatalf("key %s has type %s, which this dump cannot read", k, typ)
		}
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "redis %s %s: %v\n", typ, k, v)
	}
	return b.String()
}

// around shows where s occurs in dump.
func around(dump, s string) string {
	i := strings.Index(dump, s)
	from, to := max(0, i-120), min(len(dump), i+len(s)+40)
	return fmt.Sprintf("…%q…", dump[from:to])
}
