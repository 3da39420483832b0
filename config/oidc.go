package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// OIDC is single sign-on through one OpenID Connect provider; the zero
// value is off (no "Sign in with SSO", and its routes are 404).
type OIDC struct {
	Issuer       string // SLUICE_OIDC_ISSUER: the provider's issuer URL, exactly as its ID tokens name it
	ClientID     string // SLUICE_OIDC_CLIENT_ID
	ClientSecret string // SLUICE_OIDC_CLIENT_SECRET: never logged
	// Domains maps an email domain (lower case) to the organization a new
	// user of that domain joins, as a member, on their first sign-in
	// (SLUICE_OIDC_DOMAINS, "example.com=42,corp.example=7").
	Domains map[string]int64
}

// Enabled says whether single sign-on is configured.
func (o OIDC) Enabled() bool { return o.Issuer != "" }

// RedirectURL is where the provider sends the browser back: the callback
// under SLUICE_PUBLIC_URL, which the provider must have registered.
func (c Config) RedirectURL() string { return c.PublicURL + "/auth/oidc/callback" }

// loopbackHost says whether host (no port) is this machine, where plain
// http is allowed for tests and local development.
func loopbackHost(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// publicURL reads SLUICE_PUBLIC_URL: the scheme and host (and an optional
// path prefix) browsers reach Sluice at, without a trailing slash. https,
// but for a loopback host.
func (r *reader) publicURL(name string) string {
	v := strings.TrimSuffix(strings.TrimSpace(r.getenv(name)), "/")
	if v == "" {
		return ""
	}
	if err := checkURL(v); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q %v (e.g. https://sluice.example.com)", name, v, err))
		return ""
	}
	return v
}

// checkURL accepts an absolute https URL without query or fragment, or an
// http one on a loopback host.
func checkURL(v string) error {
	u, err := url.Parse(v)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return errors.New("is not an absolute URL")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("must have no query, fragment or user info")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
		return nil
	default:
		return errors.New("must be https (plain http only for localhost or 127.0.0.1)")
	}
}

// oidc reads the SLUICE_OIDC_* settings: issuer, client id and secret all
// or none; the domains only with them; the public URL, which the redirect
// URL is made of, required with them.
func (r *reader) oidc(publicURL string) OIDC {
	o := OIDC{
		Issuer:       strings.TrimSpace(r.getenv("SLUICE_OIDC_ISSUER")),
		ClientID:     strings.TrimSpace(r.getenv("SLUICE_OIDC_CLIENT_ID")),
		ClientSecret: r.getenv("SLUICE_OIDC_CLIENT_SECRET"),
	}
	domains := strings.TrimSpace(r.getenv("SLUICE_OIDC_DOMAINS"))
	set := 0
	for _, v := range []string{o.Issuer, o.ClientID, o.ClientSecret} {
		if v != "" {
			set++
		}
	}
	if set == 0 {
		if domains != "" {
			r.errs = append(r.errs, errors.New("SLUICE_OIDC_DOMAINS: set only with SLUICE_OIDC_ISSUER, SLUICE_OIDC_CLIENT_ID and SLUICE_OIDC_CLIENT_SECRET"))
		}
		return OIDC{}
	}
	if set < 3 {
		var missing []string
		for _, v := range [][2]string{{"SLUICE_OIDC_ISSUER", o.Issuer}, {"SLUICE_OIDC_CLIENT_ID", o.ClientID}, {"SLUICE_OIDC_CLIENT_SECRET", o.ClientSecret}} {
			if v[1] == "" {
				missing = append(missing, v[0])
			}
		}
		r.errs = append(r.errs, fmt.Errorf("%s: single sign-on needs SLUICE_OIDC_ISSUER, SLUICE_OIDC_CLIENT_ID and SLUICE_OIDC_CLIENT_SECRET together", strings.Join(missing, ", ")))
		return OIDC{}
	}
	if err := checkURL(o.Issuer); err != nil {
		r.errs = append(r.errs, fmt.Errorf("SLUICE_OIDC_ISSUER: %q %v (e.g. https://login.example.com)", o.Issuer, err))
	}
	if publicURL == "" && strings.TrimSpace(r.getenv("SLUICE_PUBLIC_URL")) == "" {
		r.errs = append(r.errs, errors.New("SLUICE_PUBLIC_URL: required with SLUICE_OIDC_ISSUER: the provider sends people back to <SLUICE_PUBLIC_URL>/auth/oidc/callback"))
	}
	o.Domains = r.domains("SLUICE_OIDC_DOMAINS", domains)
	return o
}

// domains reads "example.com=42,corp.example=7": an email domain, '=', an
// organization id. That the organizations exist is checked at start, with
// the database (internal/app).
func (r *reader) domains(name, v string) map[string]int64 {
	out := map[string]int64{}
	if v == "" {
		return out
	}
	for _, pair := range strings.Split(v, ",") {
		d, id, ok := strings.Cut(strings.TrimSpace(pair), "=")
		d = strings.ToLower(strings.TrimSpace(d))
		n, err := strconv.ParseInt(strings.TrimSpace(id), 10, 64)
		if !ok || !validDomain(d) || err != nil || n <= 0 {
			r.errs = append(r.errs, fmt.Errorf("%s: %q must be email domains with organization ids, like example.com=42,corp.example=7", name, strings.TrimSpace(pair)))
			return map[string]int64{}
		}
		if _, dup := out[d]; dup {
			r.errs = append(r.errs, fmt.Errorf("%s: %s is listed twice", name, d))
			return map[string]int64{}
		}
		out[d] = n
	}
	return out
}

// validDomain accepts a host name of dot-separated labels of letters,
// digits and inner hyphens: what follows the @ of an address.
func validDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
