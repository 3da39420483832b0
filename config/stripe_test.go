package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/money"
)

// TestStripeSettings: payments are off by default; the key and the webhook
// secret go together; the API base, currency and top-up bounds are checked,
// each refusal naming its variable.
func TestStripeSettings(t *testing.T) {
	c, err := Load(nil, env(nil))
	if err != nil || c.StripeSecretKey != "" || c.StripeAPIBase != "https://api.stripe.com" || c.StripeCurrency != "usd" ||
		c.TopUpMin != 5*money.Dollar || c.TopUpMax != 1000*money.Dollar {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	good := map[string]string{"SLUICE_STRIPE_SECRET_KEY": "sk_test_123", "SLUICE_STRIPE_WEBHOOK_SECRET": "whsec_abc",
		"SLUICE_STRIPE_API_BASE": "http://127.0.0.1:12111", "SLUICE_STRIPE_CURRENCY": "eur", "SLUICE_TOPUP_MIN": "0.50", "SLUICE_TOPUP_MAX": "2500"}
	if c, err := Load(nil, env(good)); err != nil || c.TopUpMin != 50*money.Cent || c.TopUpMax != 2500*money.Dollar || c.StripeCurrency != "eur" {
		t.Fatalf("good settings: %+v %v", c, err)
	}
	for _, bad := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"SLUICE_STRIPE_SECRET_KEY": "sk_test_123"}, "SLUICE_STRIPE_WEBHOOK_SECRET: required with SLUICE_STRIPE_SECRET_KEY"},
		{map[string]string{"SLUICE_STRIPE_WEBHOOK_SECRET": "whsec_abc"}, "SLUICE_STRIPE_SECRET_KEY: required with SLUICE_STRIPE_WEBHOOK_SECRET"},
		{map[string]string{"SLUICE_STRIPE_SECRET_KEY": "pk_test_123", "SLUICE_STRIPE_WEBHOOK_SECRET": "whsec_abc"}, "SLUICE_STRIPE_SECRET_KEY: must be a Stripe secret or restricted key"},
		{map[string]string{"SLUICE_STRIPE_SECRET_KEY": "sk_test_123", "SLUICE_STRIPE_WEBHOOK_SECRET": "abc"}, "SLUICE_STRIPE_WEBHOOK_SECRET: must be a webhook signing secret"},
		{map[string]string{"SLUICE_STRIPE_API_BASE": "api.stripe.com"}, "SLUICE_STRIPE_API_BASE"},
		{map[string]string{"SLUICE_STRIPE_CURRENCY": "jpy"}, "SLUICE_STRIPE_CURRENCY"},
		{map[string]string{"SLUICE_STRIPE_CURRENCY": "USD"}, "SLUICE_STRIPE_CURRENCY"},
		{map[string]string{"SLUICE_TOPUP_MIN": "0.49"}, "SLUICE_TOPUP_MIN"},
		{map[string]string{"SLUICE_TOPUP_MIN": "5.001"}, "SLUICE_TOPUP_MIN: \"5.001\" must be dollars in whole cents"},
		{map[string]string{"SLUICE_TOPUP_MIN": "50", "SLUICE_TOPUP_MAX": "20"}, "SLUICE_TOPUP_MIN: 50.00 is above SLUICE_TOPUP_MAX (20.00)"},
	} {
		_, err := Load(nil, env(bad.set))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.set, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk_test_123") {
			t.Errorf("the secret key is in the error: %v", err)
		}
	}
}
