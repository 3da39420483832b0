package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestTrustedProxies(t *testing.T) {
	c, err := Load(nil, env(nil))
	if err != nil || c.TrustedProxies != nil {
		t.Fatalf("default: %v, %v; want no trusted proxy", c.TrustedProxies, err)
	}
	c, err = Load(nil, env(map[string]string{"SLUICE_TRUSTED_PROXIES": " 10.0.0.0/8, 192.0.2.7,2001:db8::/32 ,10.1.2.3/16"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("10.1.0.0/16")}
	if !slices.Equal(c.TrustedProxies, want) {
		t.Fatalf("got %v, want %v", c.TrustedProxies, want)
	}
	for _, bad := range []string{"proxy.internal", "10.0.0.0/33", "0.0.0.0/0", "::/0", "10.0.0.1,", "fe80::1%eth0"} {
		_, err := Load(nil, env(map[string]string{"SLUICE_TRUSTED_PROXIES": bad}))
		if err == nil || !strings.Contains(err.Error(), "SLUICE_TRUSTED_PROXIES") {
			t.Errorf("%q: got %v, want an error naming SLUICE_TRUSTED_PROXIES", bad, err)
		}
	}
}
