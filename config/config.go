// Package config reads Sluice's settings once, from the environment and the
// command line, and says exactly which one is wrong.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	netmail "net/mail"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/secrets"
)

// Config is every setting of a Sluice process.
type Config struct {
	Command         string        // "serve" (default) or "migrate"
	Addr            string        // SLUICE_ADDR
	DatabaseURL     string        // DATABASE_URL; empty means the embedded SQLite file
	DataDir         string        // SLUICE_DATA_DIR
	RedisURL        string        // REDIS_URL, reserved for shared limits
	AutoMigrate     bool          // SLUICE_AUTO_MIGRATE
	AdminEmail      string        // SLUICE_ADMIN_EMAIL
	AdminPassword   string        // SLUICE_ADMIN_PASSWORD
	SessionSecret   string        // SLUICE_SESSION_SECRET
	SessionTTL      time.Duration // SLUICE_SESSION_TTL
	MaxBodyBytes    int64         // SLUICE_MAX_BODY_BYTES
	BcryptCost      int           // SLUICE_BCRYPT_COST
	TokenCacheTTL   time.Duration // SLUICE_TOKEN_CACHE_TTL
	ShutdownTimeout time.Duration // SLUICE_SHUTDOWN_TIMEOUT
	LogLevel        string        // SLUICE_LOG_LEVEL

	ExpectedNodes    int              // SLUICE_EXPECTED_NODES: share of a limit each node keeps when Redis is down
	PriorityWeights  map[string]int64 // SLUICE_PRIORITY_WEIGHTS: X-Sluice-Priority -> request weight
	DefaultMaxTokens int64            // SLUICE_DEFAULT_MAX_TOKENS: the completion bound of a request without max_tokens to a model whose longest answer is unknown
	UsageGrace       time.Duration    // SLUICE_USAGE_GRACE: how long a finished stream is read for its usage after the client left
	RedisTimeout     time.Duration    // SLUICE_REDIS_TIMEOUT: one Redis call's budget for the cache, sessions and rejection counts
	LimiterTimeout   time.Duration    // SLUICE_LIMITER_TIMEOUT: one shared-limiter call's budget before that request is decided locally
	TuneInterval     time.Duration    // SLUICE_TUNE_INTERVAL: how often the auto-tuner samples load
	MaxConcurrency   int              // SLUICE_MAX_CONCURRENCY: in-flight requests that count as full load
	LatencyTarget    time.Duration    // SLUICE_LATENCY_TARGET: p95 latency that counts as full load
	NodeID           string           // SLUICE_NODE_ID: this node's name in leader leases; default host name
	RedisPrefix      string           // SLUICE_REDIS_PREFIX: namespace of Sluice's Redis keys and channel

	MasterKey          []byte        // SLUICE_MASTER_KEY: seals provider keys; generated in the data dir when embedded
	UpstreamAttempt    time.Duration // SLUICE_UPSTREAM_ATTEMPT_TIMEOUT: a stream's wait for its headers, and for each byte after
	UpstreamAnswer     time.Duration // SLUICE_UPSTREAM_ANSWER_TIMEOUT: one attempt of a whole (non-streamed) answer
	UpstreamBudget     time.Duration // SLUICE_UPSTREAM_BUDGET: all attempts of one request
	UpstreamMaxBackoff time.Duration // SLUICE_UPSTREAM_MAX_BACKOFF: cap of a retry wait, Retry-After included
	CacheTTL           time.Duration // SLUICE_CACHE_TTL: how long a cached answer is served
	CacheMaxBytes      int64         // SLUICE_CACHE_MAX_BYTES: in-process cache size
	ConversationTTL    time.Duration // SLUICE_CHAT_SESSION_TTL: idle time after which an X-Sluice-Session is forgotten
	ConversationTokens int           // SLUICE_CHAT_SESSION_TOKENS: history kept in front of a request, in tokens
	PprofAddr          string        // SLUICE_PPROF_ADDR: where to serve net/http/pprof (loopback only); empty = off

	WebhookHosts string // SLUICE_WEBHOOK_HOSTS: hosts budget alerts and job callbacks may be posted to
	// SLUICE_WEBHOOK_ALLOW_PRIVATE: webhooks may reach loopback, private,
	// link-local, CGNAT and metadata addresses (development only; warned at start)
	WebhookAllowPrivate bool
	WebhookAllowHTTP    bool          // SLUICE_WEBHOOK_ALLOW_HTTP: webhooks may go over plain http (development only; warned at start)
	WebhookHostLimit    int           // SLUICE_WEBHOOK_HOST_CONCURRENCY: deliveries to one host at once on this node
	WebhookWorkers      int           // SLUICE_WEBHOOK_WORKERS: deliveries in flight at once on this node, all hosts together
	WebhookAttempts     int           // SLUICE_WEBHOOK_ATTEMPTS: attempts before a delivery fails
	WebhookRetryBase    time.Duration // SLUICE_WEBHOOK_RETRY_BASE: a delivery's first retry backoff ceiling, doubling per attempt
	FinalizeInterval    time.Duration // SLUICE_INVOICE_INTERVAL: how often a node closes the invoices of ended months

	JobWorkers   int           // SLUICE_JOB_WORKERS: jobs worked at once on this node
	JobAttempts  int           // SLUICE_JOB_ATTEMPTS: attempts before a job fails
	JobRetention time.Duration // SLUICE_JOB_RETENTION: how long finished jobs and their answers are kept
	JobRetryBase time.Duration // SLUICE_JOB_RETRY_BASE: a job's first retry backoff ceiling, doubling per attempt

	BatchRetention time.Duration // SLUICE_BATCH_RETENTION: how long batch files are kept, and finished batches after their window
	FileStorage    int64         // SLUICE_FILE_STORAGE: bytes of files one organization may keep

	ResponseRetention time.Duration // SLUICE_RESPONSE_RETENTION: how long stored Responses API responses are kept (OpenAI keeps them 30 days)
	// SLUICE_DELETED_ORG_RETENTION: how long a deleted organization's data
	// is kept, for export, before the purge deletes it
	DeletedOrgRetention time.Duration

	// Mail. Without SMTPURL Sluice sends none (the embedded default).
	SMTPURL  string      // SLUICE_SMTP_URL: smtp://user:pass@host:port (STARTTLS when offered) or smtps://
	SMTP     mail.Server // SMTPURL, parsed
	MailFrom string      // SLUICE_MAIL_FROM: the From of every mail, e.g. Sluice <sluice@example.com>

	// Security.
	TrustedProxies []netip.Prefix // SLUICE_TRUSTED_PROXIES: proxies whose X-Forwarded-For and X-Forwarded-Proto are believed; none by default
	SignupRate     int            // SLUICE_SIGNUP_RATE: signups an hour per client address; 0 = not throttled
	RedeemRate     int            // SLUICE_REDEEM_RATE: redeem-code attempts an hour per organization and per client address; 0 = not throttled

	// Payments through Stripe; off without the secret key.
	StripeSecretKey     string       // SLUICE_STRIPE_SECRET_KEY: sk_… or rk_…; empty: payments off
	StripeWebhookSecret string       // SLUICE_STRIPE_WEBHOOK_SECRET: whsec_…, the webhook endpoint's signing secret
	StripeAPIBase       string       // SLUICE_STRIPE_API_BASE: Stripe's API, or stripe-mock's in tests
	StripeCurrency      string       // SLUICE_STRIPE_CURRENCY: ISO code, lower case, of a currency with cents
	TopUpMin            money.Amount // SLUICE_TOPUP_MIN: the smallest top-up, whole cents
	TopUpMax            money.Amount // SLUICE_TOPUP_MAX: the largest top-up, whole cents

	// Observability.
	LogFormat    string // SLUICE_LOG_FORMAT: json (default with DATABASE_URL) or text (default embedded)
	LogPrompts   bool   // SLUICE_LOG_PROMPTS: log prompts and replies, redacted; off by default
	MetricsAddr  string // SLUICE_METRICS_ADDR: serve /metrics on this address instead of the main one
	MetricsToken string // SLUICE_METRICS_TOKEN: bearer token /metrics requires

	// PublicURL is where browsers reach Sluice (SLUICE_PUBLIC_URL,
	// https://sluice.example.com), without a trailing slash: the base of
	// every link in a mail and of single sign-on's redirect URL. Empty
	// when unset.
	PublicURL string
	OIDC      OIDC // SLUICE_OIDC_*: single sign-on; zero when off
}

// MaxSignupRate bounds SLUICE_SIGNUP_RATE (signups an hour per address).
const MaxSignupRate = 1_000_000

// SQLitePath is where the embedded database lives.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "sluice.db") }

// Embedded says whether Sluice runs on its own SQLite file.
func (c Config) Embedded() bool { return c.DatabaseURL == "" }

// Load reads the configuration. args are the command-line arguments after
// the program name: an optional command, then flags that override the
// environment.
func Load(args []string, getenv func(string) string) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{
		Addr:            r.str("SLUICE_ADDR", ":8080"),
		DatabaseURL:     r.str("DATABASE_URL", ""),
		DataDir:         r.str("SLUICE_DATA_DIR", "data"),
		RedisURL:        r.str("REDIS_URL", ""),
		AdminEmail:      r.str("SLUICE_ADMIN_EMAIL", "admin@localhost"),
		AdminPassword:   r.str("SLUICE_ADMIN_PASSWORD", ""),
		SessionSecret:   r.str("SLUICE_SESSION_SECRET", ""),
		SessionTTL:      r.duration("SLUICE_SESSION_TTL", 12*time.Hour, time.Minute, 30*24*time.Hour),
		MaxBodyBytes:    r.int64("SLUICE_MAX_BODY_BYTES", 1<<20, 1<<10, 64<<20),
		BcryptCost:      int(r.int64("SLUICE_BCRYPT_COST", 12, 4, 16)),
		TokenCacheTTL:   r.duration("SLUICE_TOKEN_CACHE_TTL", 30*time.Second, time.Second, time.Hour),
		ShutdownTimeout: r.duration("SLUICE_SHUTDOWN_TIMEOUT", 15*time.Second, time.Second, 10*time.Minute),
		LogLevel:        r.oneOf("SLUICE_LOG_LEVEL", "info", "debug", "info", "warn", "error"),

		ExpectedNodes:    int(r.int64("SLUICE_EXPECTED_NODES", 1, 1, 1000)),
		PriorityWeights:  r.weights("SLUICE_PRIORITY_WEIGHTS", "low=1,normal=1,high=2"),
		DefaultMaxTokens: r.int64("SLUICE_DEFAULT_MAX_TOKENS", 512, 1, 1_000_000),
		UsageGrace:       r.duration("SLUICE_USAGE_GRACE", 10*time.Second, 0, 10*time.Minute),
		RedisTimeout:     r.duration("SLUICE_REDIS_TIMEOUT", 100*time.Millisecond, time.Millisecond, 10*time.Second),
		LimiterTimeout:   r.duration("SLUICE_LIMITER_TIMEOUT", 500*time.Millisecond, time.Millisecond, 10*time.Second),
		TuneInterval:     r.duration("SLUICE_TUNE_INTERVAL", 5*time.Second, 100*time.Millisecond, 10*time.Minute),
		MaxConcurrency:   int(r.int64("SLUICE_MAX_CONCURRENCY", 256, 1, 1_000_000)),
		LatencyTarget:    r.duration("SLUICE_LATENCY_TARGET", 5*time.Second, time.Millisecond, 10*time.Minute),
		NodeID:           r.str("SLUICE_NODE_ID", ""),
		RedisPrefix:      r.str("SLUICE_REDIS_PREFIX", "sluice:"),

		UpstreamAttempt:    r.duration("SLUICE_UPSTREAM_ATTEMPT_TIMEOUT", 8*time.Second, 100*time.Millisecond, 10*time.Minute),
		UpstreamAnswer:     r.duration("SLUICE_UPSTREAM_ANSWER_TIMEOUT", 10*time.Minute, 100*time.Millisecond, time.Hour),
		UpstreamBudget:     r.duration("SLUICE_UPSTREAM_BUDGET", 30*time.Second, 100*time.Millisecond, 30*time.Minute),
		UpstreamMaxBackoff: r.duration("SLUICE_UPSTREAM_MAX_BACKOFF", 8*time.Second, time.Millisecond, 10*time.Minute),
		CacheTTL:           r.duration("SLUICE_CACHE_TTL", 5*time.Minute, time.Second, 24*time.Hour),
		CacheMaxBytes:      r.int64("SLUICE_CACHE_MAX_BYTES", 64<<20, 1<<20, 64<<30),
		ConversationTTL:    r.duration("SLUICE_CHAT_SESSION_TTL", 30*time.Minute, time.Second, 30*24*time.Hour),
		ConversationTokens: int(r.int64("SLUICE_CHAT_SESSION_TOKENS", 4096, 64, 1_000_000)),
		PprofAddr:          r.str("SLUICE_PPROF_ADDR", ""),

		WebhookHosts:        r.str("SLUICE_WEBHOOK_HOSTS", ""),
		WebhookAllowPrivate: r.bool("SLUICE_WEBHOOK_ALLOW_PRIVATE", false),
		WebhookAllowHTTP:    r.bool("SLUICE_WEBHOOK_ALLOW_HTTP", false),
		WebhookHostLimit:    int(r.int64("SLUICE_WEBHOOK_HOST_CONCURRENCY", 4, 1, 1000)),
		WebhookWorkers:      int(r.int64("SLUICE_WEBHOOK_WORKERS", 32, 1, 10000)),
		WebhookAttempts:     int(r.int64("SLUICE_WEBHOOK_ATTEMPTS", 8, 1, 100)),
		WebhookRetryBase:    r.duration("SLUICE_WEBHOOK_RETRY_BASE", 10*time.Second, time.Millisecond, time.Hour),
		FinalizeInterval:    r.duration("SLUICE_INVOICE_INTERVAL", 5*time.Minute, time.Second, 24*time.Hour),

		JobWorkers:   int(r.int64("SLUICE_JOB_WORKERS", 10, 1, 1000)),
		JobAttempts:  int(r.int64("SLUICE_JOB_ATTEMPTS", 5, 1, 100)),
		JobRetention: r.duration("SLUICE_JOB_RETENTION", 7*24*time.Hour, time.Minute, 365*24*time.Hour),
		JobRetryBase: r.duration("SLUICE_JOB_RETRY_BASE", 10*time.Second, time.Millisecond, time.Hour),

		BatchRetention: r.duration("SLUICE_BATCH_RETENTION", 30*24*time.Hour, time.Hour, 365*24*time.Hour),
		FileStorage:    r.int64("SLUICE_FILE_STORAGE", 1<<30, 1<<20, 1<<40),

		ResponseRetention:   r.duration("SLUICE_RESPONSE_RETENTION", 30*24*time.Hour, time.Minute, 365*24*time.Hour),
		DeletedOrgRetention: r.duration("SLUICE_DELETED_ORG_RETENTION", 30*24*time.Hour, time.Hour, 365*24*time.Hour),

		SMTPURL:  r.str("SLUICE_SMTP_URL", ""),
		MailFrom: r.str("SLUICE_MAIL_FROM", ""),

		// Security.
		TrustedProxies: r.prefixes("SLUICE_TRUSTED_PROXIES"),
		SignupRate:     int(r.int64("SLUICE_SIGNUP_RATE", 5, 0, MaxSignupRate)),
		RedeemRate:     int(r.int64("SLUICE_REDEEM_RATE", 10, 0, MaxSignupRate)),

		// Observability.
		MetricsAddr:  r.str("SLUICE_METRICS_ADDR", ""),
		MetricsToken: r.str("SLUICE_METRICS_TOKEN", ""),
	}
	r.stripe(&c)
	defaultFormat := "json"
	if c.Embedded() {
		defaultFormat = "text"
	}
	c.LogFormat = r.oneOf("SLUICE_LOG_FORMAT", defaultFormat, "json", "text")
	c.LogPrompts = r.bool("SLUICE_LOG_PROMPTS", false)
	c.PublicURL = r.publicURL("SLUICE_PUBLIC_URL")
	c.OIDC = r.oidc(c.PublicURL)
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			r.errs = append(r.errs, fmt.Errorf("SLUICE_METRICS_ADDR: %q is not host:port (e.g. 127.0.0.1:9090)", c.MetricsAddr))
		}
	}
	if c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		r.errs = append(r.errs, errors.New("SLUICE_METRICS_TOKEN: must be at least 16 characters"))
	}
	if c.PprofAddr != "" {
		if host, _, err := net.SplitHostPort(c.PprofAddr); err != nil || (host != "127.0.0.1" && host != "localhost" && host != "::1") {
			r.errs = append(r.errs, fmt.Errorf("SLUICE_PPROF_ADDR: %q must be a loopback host:port such as 127.0.0.1:6060 (profiles are not for the internet)", c.PprofAddr))
		}
	}
	if v := getenv("SLUICE_MASTER_KEY"); v != "" {
		key, err := secrets.ParseMasterKey(v)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("SLUICE_MASTER_KEY: %w", err))
		}
		c.MasterKey = key
	} else if c.DatabaseURL != "" {
		r.errs = append(r.errs, errors.New("SLUICE_MASTER_KEY: required with DATABASE_URL (it seals provider keys; e.g. openssl rand -hex 32)"))
	}
	r.mail(&c)
	if c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") {
		r.errs = append(r.errs, errors.New("REDIS_URL: must start with redis:// or rediss://"))
	}
	// The embedded default migrates itself so `go run .` just works; against
	// a shared Postgres, migrating is an explicit step (`sluice migrate`).
	c.AutoMigrate = r.bool("SLUICE_AUTO_MIGRATE", c.Embedded())

	c.Command = "serve"
	if len(args) > 0 && (args[0] == "serve" || args[0] == "migrate") {
		c.Command, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the embedded database")
	if err := fs.Parse(args); err != nil {
		r.errs = append(r.errs, fmt.Errorf("command line: %w (usage: sluice [serve|migrate] [-addr :8080] [-data-dir data])", err))
	} else if fs.NArg() > 0 {
		r.errs = append(r.errs, fmt.Errorf("command line: unknown command %q (want serve or migrate)", fs.Arg(0)))
	}

	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_ADDR: %q is not host:port (e.g. :8080)", c.Addr))
	}
	if _, err := netmail.ParseAddress(c.AdminEmail); err != nil {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_ADMIN_EMAIL: %q is not an email address", c.AdminEmail))
	}
	if c.AdminPassword != "" && (len(c.AdminPassword) < 8 || len(c.AdminPassword) > 72) {
		r.errs = append(r.errs, errors.New("SLUICE_ADMIN_PASSWORD: must be 8 to 72 bytes"))
	}
	if c.SessionSecret != "" && len(c.SessionSecret) < 32 {
		r.errs = append(r.errs, errors.New("SLUICE_SESSION_SECRET: must be at least 32 characters"))
	}
	if c.DataDir == "" {
		r.errs = append(r.errs, errors.New("SLUICE_DATA_DIR: must not be empty"))
	}
	return c, errors.Join(r.errs...)
}

// MailOn says whether Sluice sends mail (SLUICE_SMTP_URL is set).
func (c Config) MailOn() bool { return c.SMTPURL != "" }

// mail checks the mail settings: a mail server needs a sender and a public
// URL, since links in mails must not be built from a request's Host
// header, which whoever asks for a password reset chooses.
func (r *reader) mail(c *Config) {
	if c.SMTPURL == "" {
		if c.MailFrom != "" {
			r.errs = append(r.errs, errors.New("SLUICE_MAIL_FROM: set without SLUICE_SMTP_URL, so no mail would be sent"))
		}
		return
	}
	server, err := mail.ParseURL(c.SMTPURL)
	if err != nil {
		// The URL may hold a password: the message names the variable, not its value.
		r.errs = append(r.errs, fmt.Errorf("SLUICE_SMTP_URL: %w", err))
	}
	c.SMTP = server
	if a, err := netmail.ParseAddress(c.MailFrom); c.MailFrom == "" || err != nil || a.Address == "" {
		r.errs = append(r.errs, errors.New("SLUICE_MAIL_FROM: required with SLUICE_SMTP_URL, an address like Sluice <sluice@example.com>"))
	}
	if c.PublicURL == "" {
		r.errs = append(r.errs, errors.New("SLUICE_PUBLIC_URL: required with SLUICE_SMTP_URL, the base of the links in mails (e.g. https://sluice.example.com)"))
	}
}

// Payments outside these bounds are refused by Stripe (its minimum charge
// is $0.50) or too large to be a top-up.
var (
	minTopUp = 50 * money.Cent
	maxTopUp = 100_000 * money.Dollar
)

// zeroDecimal are Stripe's currencies without cents: Sluice's amounts are
// dollars and cents, so they cannot be charged in them.
var zeroDecimal = []string{"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}

// stripe reads the payment settings: the secret key and the webhook
// secret go together, amounts are whole cents.
func (r *reader) stripe(c *Config) {
	c.StripeSecretKey = r.str("SLUICE_STRIPE_SECRET_KEY", "")
	c.StripeWebhookSecret = r.str("SLUICE_STRIPE_WEBHOOK_SECRET", "")
	c.StripeAPIBase = r.str("SLUICE_STRIPE_API_BASE", "https://api.stripe.com")
	c.StripeCurrency = r.str("SLUICE_STRIPE_CURRENCY", "usd")
	c.TopUpMin = r.amount("SLUICE_TOPUP_MIN", "5.00")
	c.TopUpMax = r.amount("SLUICE_TOPUP_MAX", "1000.00")
	key, hook := c.StripeSecretKey, c.StripeWebhookSecret
	switch {
	case key != "" && !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_"):
		r.errs = append(r.errs, errors.New("SLUICE_STRIPE_SECRET_KEY: must be a Stripe secret or restricted key (sk_… or rk_…)"))
	case key != "" && hook == "":
		r.errs = append(r.errs, errors.New("SLUICE_STRIPE_WEBHOOK_SECRET: required with SLUICE_STRIPE_SECRET_KEY (the whsec_… of the webhook endpoint; see docs/ADMIN.md)"))
	case key == "" && hook != "":
		r.errs = append(r.errs, errors.New("SLUICE_STRIPE_SECRET_KEY: required with SLUICE_STRIPE_WEBHOOK_SECRET"))
	case hook != "" && !strings.HasPrefix(hook, "whsec_"):
		r.errs = append(r.errs, errors.New("SLUICE_STRIPE_WEBHOOK_SECRET: must be a webhook signing secret (whsec_…)"))
	}
	if u, err := url.Parse(c.StripeAPIBase); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" && u.Path != "/" {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_STRIPE_API_BASE: %q must be a base URL such as https://api.stripe.com", c.StripeAPIBase))
	}
	cur := c.StripeCurrency
	if len(cur) != 3 || strings.ToLower(cur) != cur || strings.Trim(cur, "abcdefghijklmnopqrstuvwxyz") != "" || slices.Contains(zeroDecimal, cur) {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_STRIPE_CURRENCY: %q must be a lower-case ISO code of a currency with cents, such as usd or eur", cur))
	}
	if c.TopUpMin > c.TopUpMax {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_TOPUP_MIN: %s is above SLUICE_TOPUP_MAX (%s)", c.TopUpMin, c.TopUpMax))
	}
}

// amount reads a decimal string of dollars in whole cents, from $0.50
// (Stripe's smallest charge) to $100,000.
func (r *reader) amount(name, def string) money.Amount {
	v := r.str(name, def)
	a, err := money.ParseAmount(v)
	if err != nil || a.RoundCents() != a || a < minTopUp || a > maxTopUp {
		r.errs = append(r.errs, fmt.Errorf("%s: %q must be dollars in whole cents, such as 5.00, from %s to %s", name, v,
			minTopUp.StringCents(), maxTopUp.StringCents()))
		d, _ := money.ParseAmount(def)
		return d
	}
	return a
}

// reader collects every bad variable so one start-up names them all.
type reader struct {
	getenv func(string) string
	errs   []error
}

func (r *reader) str(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

func (r *reader) int64(name string, def, lo, hi int64) int64 {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		r.errs = append(r.errs, fmt.Errorf("%s: %q must be a whole number from %d to %d", name, v, lo, hi))
		return def
	}
	return n
}

func (r *reader) duration(name string, def, lo, hi time.Duration) time.Duration {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < lo || d > hi {
		r.errs = append(r.errs, fmt.Errorf("%s: %q must be a duration like 30s or 12h, from %s to %s", name, v, lo, hi))
		return def
	}
	return d
}

// weights reads "name=weight,…" for the three priorities.
func (r *reader) weights(name, def string) map[string]int64 {
	v := r.str(name, def)
	out := map[string]int64{"low": 1, "normal": 1, "high": 1}
	for _, pair := range strings.Split(v, ",") {
		k, w, ok := strings.Cut(strings.TrimSpace(pair), "=")
		n, err := strconv.ParseInt(w, 10, 64)
		if _, known := out[k]; !ok || !known || err != nil || n < 1 || n > 1000 {
			r.errs = append(r.errs, fmt.Errorf("%s: %q must look like low=1,normal=1,high=2 (weights 1 to 1000)", name, v))
			return map[string]int64{"low": 1, "normal": 1, "high": 2}
		}
		out[k] = n
	}
	return out
}

func (r *reader) bool(name string, def bool) bool {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q must be true or false", name, v))
		return def
	}
	return b
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.errs = append(r.errs, fmt.Errorf("%s: %q must be one of %v", name, v, allowed))
	return def
}

// prefixes reads a comma-separated list of IP addresses and CIDR networks
// ("10.0.0.0/8,192.0.2.7"); empty is none. A network covering every
// address would trust anyone's forwarding headers, so it is refused.
func (r *reader) prefixes(name string) []netip.Prefix {
	v := r.getenv(name)
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []netip.Prefix
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil || a.Zone() != "" {
				r.errs = append(r.errs, fmt.Errorf("%s: %q is not an IP address or CIDR network (e.g. 10.0.0.0/8,192.0.2.7)", name, item))
				return nil
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Bits() == 0 {
			r.errs = append(r.errs, fmt.Errorf("%s: %q would trust every address; list your proxies' addresses", name, item))
			return nil
		}
		out = append(out, p.Masked())
	}
	return out
}
