package config

import (
	"maps"
	"strings"
	"testing"
)

// sso is a complete single sign-on setting; tests change one variable.
func sso(over map[string]string) map[string]string {
	m := map[string]string{
		"SLUICE_PUBLIC_URL":         "https://sluice.example.com/",
		"SLUICE_OIDC_ISSUER":        "https://login.example.com",
		"SLUICE_OIDC_CLIENT_ID":     "sluice",
		"SLUICE_OIDC_CLIENT_SECRET": "s3cret",
		"SLUICE_OIDC_DOMAINS":       "Example.com=42, corp.example=7",
	}
	maps.Copy(m, over)
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}

func TestOIDCSettings(t *testing.T) {
	c, err := Load(nil, env(sso(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.OIDC.Enabled() || c.OIDC.Issuer != "https://login.example.com" || c.OIDC.ClientID != "sluice" || c.OIDC.ClientSecret != "s3cret" {
		t.Fatalf("OIDC %+v", c.OIDC)
	}
	if len(c.OIDC.Domains) != 2 || c.OIDC.Domains["example.com"] != 42 || c.OIDC.Domains["corp.example"] != 7 {
		t.Fatalf("domains %v, want example.com=42 (lower-cased) and corp.example=7", c.OIDC.Domains)
	}
	if c.RedirectURL() != "https://sluice.example.com/auth/oidc/callback" {
		t.Fatalf("redirect URL %q", c.RedirectURL())
	}

	// Off by default, and on loopback plain http is allowed (tests, local
	// development).
	if c, err := Load(nil, env(nil)); err != nil || c.OIDC.Enabled() || c.PublicURL != "" {
		t.Fatalf("default: %+v %v", c.OIDC, err)
	}
	c, err = Load(nil, env(sso(map[string]string{"SLUICE_PUBLIC_URL": "http://127.0.0.1:8080", "SLUICE_OIDC_ISSUER": "http://localhost:5556/oidc", "SLUICE_OIDC_DOMAINS": ""})))
	if err != nil || c.OIDC.Issuer != "http://localhost:5556/oidc" || len(c.OIDC.Domains) != 0 {
		t.Fatalf("loopback: %+v %v", c.OIDC, err)
	}
}

func TestOIDCSettingsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"issuer alone", map[string]string{"SLUICE_OIDC_CLIENT_ID": "", "SLUICE_OIDC_CLIENT_SECRET": ""},
			"SLUICE_OIDC_CLIENT_ID, SLUICE_OIDC_CLIENT_SECRET: single sign-on needs SLUICE_OIDC_ISSUER, SLUICE_OIDC_CLIENT_ID and SLUICE_OIDC_CLIENT_SECRET together"},
		{"no secret", map[string]string{"SLUICE_OIDC_CLIENT_SECRET": ""}, "SLUICE_OIDC_CLIENT_SECRET: single sign-on needs"},
		{"domains alone", map[string]string{"SLUICE_OIDC_ISSUER": "", "SLUICE_OIDC_CLIENT_ID": "", "SLUICE_OIDC_CLIENT_SECRET": ""},
			"SLUICE_OIDC_DOMAINS: set only with SLUICE_OIDC_ISSUER"},
		{"http issuer", map[string]string{"SLUICE_OIDC_ISSUER": "http://login.example.com"},
			`SLUICE_OIDC_ISSUER: "http://login.example.com" must be https (plain http only for localhost or 127.0.0.1)`},
		{"relative issuer", map[string]string{"SLUICE_OIDC_ISSUER": "login.example.com"}, `SLUICE_OIDC_ISSUER: "login.example.com" is not an absolute URL`},
		{"no public URL", map[string]string{"SLUICE_PUBLIC_URL": ""}, "SLUICE_PUBLIC_URL: required with SLUICE_OIDC_ISSUER"},
		{"http public URL", map[string]string{"SLUICE_PUBLIC_URL": "http://sluice.example.com"}, `SLUICE_PUBLIC_URL: "http://sluice.example.com" must be https`},
		{"public URL with a query", map[string]string{"SLUICE_PUBLIC_URL": "https://sluice.example.com/?a=b"}, "must have no query"},
		{"no organization", map[string]string{"SLUICE_OIDC_DOMAINS": "example.com"}, `SLUICE_OIDC_DOMAINS: "example.com" must be email domains with organization ids, like example.com=42,corp.example=7`},
		{"bad organization", map[string]string{"SLUICE_OIDC_DOMAINS": "example.com=acme"}, `SLUICE_OIDC_DOMAINS: "example.com=acme" must be`},
		{"zero organization", map[string]string{"SLUICE_OIDC_DOMAINS": "example.com=0"}, `"example.com=0" must be`},
		{"an address, not a domain", map[string]string{"SLUICE_OIDC_DOMAINS": "ada@example.com=1"}, `"ada@example.com=1" must be`},
		{"empty label", map[string]string{"SLUICE_OIDC_DOMAINS": "example..com=1"}, `"example..com=1" must be`},
		{"twice", map[string]string{"SLUICE_OIDC_DOMAINS": "example.com=1,EXAMPLE.com=2"}, "SLUICE_OIDC_DOMAINS: example.com is listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(nil, env(sso(c.env)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the client secret is in the error: %v", err)
			}
		})
	}
}
