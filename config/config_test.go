package config

import (
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Load(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":8080" || c.SQLitePath() != "data/sluice.db" || !c.Embedded() || !c.AutoMigrate ||
		c.MaxBodyBytes != 1<<20 || c.BcryptCost != 12 || c.AdminEmail != "admin@localhost" || c.Command != "serve" || c.SignupRate != 5 ||
		c.ResponseRetention != 720*time.Hour || c.DeletedOrgRetention != 720*time.Hour {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

const masterKey = "0000000000000000000000000000000000000000000000000000000000000001"

func TestPostgresDoesNotAutoMigrateByDefault(t *testing.T) {
	c, err := Load([]string{"migrate"}, env(map[string]string{"DATABASE_URL": "postgres://x/y", "SLUICE_MASTER_KEY": masterKey}))
	if err != nil {
		t.Fatal(err)
	}
	if c.AutoMigrate || c.Command != "migrate" || c.Embedded() {
		t.Fatalf("got %+v", c)
	}
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	c, err := Load([]string{"-addr", ":0", "-data-dir", "/tmp/x"}, env(map[string]string{"SLUICE_ADDR": ":9000"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":0" || c.DataDir != "/tmp/x" {
		t.Fatalf("got %+v", c)
	}
}

func TestInvalidValuesNameTheVariable(t *testing.T) {
	cases := map[string]map[string]string{
		"SLUICE_ADDR":                  {"SLUICE_ADDR": "8080"},
		"SLUICE_MAX_BODY_BYTES":        {"SLUICE_MAX_BODY_BYTES": "lots"},
		"SLUICE_SESSION_TTL":           {"SLUICE_SESSION_TTL": "1"},
		"SLUICE_AUTO_MIGRATE":          {"SLUICE_AUTO_MIGRATE": "maybe"},
		"SLUICE_ADMIN_EMAIL":           {"SLUICE_ADMIN_EMAIL": "nobody"},
		"SLUICE_ADMIN_PASSWORD":        {"SLUICE_ADMIN_PASSWORD": "short"},
		"SLUICE_SESSION_SECRET":        {"SLUICE_SESSION_SECRET": "tooshort"},
		"SLUICE_BCRYPT_COST":           {"SLUICE_BCRYPT_COST": "40"},
		"SLUICE_LOG_LEVEL":             {"SLUICE_LOG_LEVEL": "loud"},
		"SLUICE_EXPECTED_NODES":        {"SLUICE_EXPECTED_NODES": "0"},
		"SLUICE_PRIORITY_WEIGHTS":      {"SLUICE_PRIORITY_WEIGHTS": "urgent=5"},
		"REDIS_URL":                    {"REDIS_URL": "localhost:6379"},
		"SLUICE_TUNE_INTERVAL":         {"SLUICE_TUNE_INTERVAL": "1ms"},
		"SLUICE_SIGNUP_RATE":           {"SLUICE_SIGNUP_RATE": "-1"},
		"SLUICE_RESPONSE_RETENTION":    {"SLUICE_RESPONSE_RETENTION": "30s"},
		"SLUICE_DELETED_ORG_RETENTION": {"SLUICE_DELETED_ORG_RETENTION": "30m"},
	}
	for name, vars := range cases {
		_, err := Load(nil, env(vars))
		if err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(name, " is required")) {
			t.Errorf("%s: got %v, want an error naming the variable", name, err)
		}
	}
	if _, err := Load([]string{"launch"}, env(nil)); err == nil || !strings.Contains(err.Error(), "launch") {
		t.Errorf("unknown command: got %v", err)
	}
}

func TestTwoBadValuesAreBothReported(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"SLUICE_ADDR": "x", "SLUICE_TOKEN_CACHE_TTL": "forever"}))
	if err == nil || !strings.Contains(err.Error(), "SLUICE_ADDR") || !strings.Contains(err.Error(), "SLUICE_TOKEN_CACHE_TTL") {
		t.Fatalf("got %v", err)
	}
	c, _ := Load(nil, env(map[string]string{"SLUICE_TOKEN_CACHE_TTL": "5s"}))
	if c.TokenCacheTTL != 5*time.Second {
		t.Fatalf("ttl %v", c.TokenCacheTTL)
	}
}

func TestPriorityWeights(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"SLUICE_PRIORITY_WEIGHTS": "high=3, low=2"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.PriorityWeights["high"] != 3 || c.PriorityWeights["low"] != 2 || c.PriorityWeights["normal"] != 1 {
		t.Fatalf("%v", c.PriorityWeights)
	}
	if d, _ := Load(nil, env(nil)); d.PriorityWeights["high"] != 2 || d.PriorityWeights["low"] != 1 || d.ExpectedNodes != 1 {
		t.Fatalf("defaults %v %d", d.PriorityWeights, d.ExpectedNodes)
	}
}

func TestSignupRate(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  int
		err   string
	}{
		{"", 5, ""},
		{"0", 0, ""}, // the throttle off
		{"20", 20, ""},
		{"1000000", 1_000_000, ""},
		{"-1", 5, `SLUICE_SIGNUP_RATE: "-1" must be a whole number from 0 to 1000000`},
		{"1000001", 5, `SLUICE_SIGNUP_RATE: "1000001" must be a whole number from 0 to 1000000`},
		{"5/h", 5, `SLUICE_SIGNUP_RATE: "5/h" must be a whole number from 0 to 1000000`},
		{"2.5", 5, `SLUICE_SIGNUP_RATE: "2.5" must be a whole number from 0 to 1000000`},
	} {
		c, err := Load(nil, env(map[string]string{"SLUICE_SIGNUP_RATE": tt.value}))
		switch {
		case tt.err == "" && (err != nil || c.SignupRate != tt.want):
			t.Errorf("%q: %d, %v; want %d", tt.value, c.SignupRate, err, tt.want)
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("%q: got %v, want %q", tt.value, err, tt.err)
		}
	}
}

// TestMailSettings: mail is off by default; SLUICE_SMTP_URL needs a sender
// and a public URL, and a bad one is named without echoing its password.
func TestMailSettings(t *testing.T) {
	c, err := Load(nil, env(nil))
	if err != nil || c.MailOn() || c.PublicURL != "" {
		t.Fatalf("default: %+v %v", c, err)
	}
	c, err = Load(nil, env(map[string]string{"SLUICE_SMTP_URL": "smtp://u:p@mail.example.com:2525", "SLUICE_MAIL_FROM": "Sluice <s@example.com>",
		"SLUICE_PUBLIC_URL": "https://sluice.example.com/"}))
	if err != nil || !c.MailOn() || c.SMTP.Addr() != "mail.example.com:2525" || c.SMTP.Username != "u" || c.PublicURL != "https://sluice.example.com" {
		t.Fatalf("mail on: %+v %v", c, err)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SLUICE_SMTP_URL": "smtp://mail.example.com"}, "SLUICE_MAIL_FROM: required with SLUICE_SMTP_URL"},
		{map[string]string{"SLUICE_SMTP_URL": "smtp://mail.example.com", "SLUICE_MAIL_FROM": "s@example.com"}, "SLUICE_PUBLIC_URL: required with SLUICE_SMTP_URL"},
		{map[string]string{"SLUICE_SMTP_URL": "imap://u:hunter2@mail.example.com"}, "SLUICE_SMTP_URL: must start with smtp://"},
		{map[string]string{"SLUICE_PUBLIC_URL": "sluice.example.com"}, "SLUICE_PUBLIC_URL: \"sluice.example.com\" is not an absolute URL (e.g. https://sluice.example.com)"},
		{map[string]string{"SLUICE_MAIL_FROM": "s@example.com"}, "SLUICE_MAIL_FROM: set without SLUICE_SMTP_URL"},
	} {
		_, err := Load(nil, env(tt.env))
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: %v, want %q", tt.env, err, tt.want)
		}
	}
}
