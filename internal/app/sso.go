package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/models"
)

// newSSO builds single sign-on when SLUICE_OIDC_* configure it, nil when
// they do not. Every organization SLUICE_OIDC_DOMAINS names must exist:
// a typo found at start costs a restart, one found at someone's first
// sign-in costs them their account's organization. The provider is
// discovered now; when it cannot be reached the node starts anyway and
// discovers it on first use (accounts.NewSSO).
func newSSO(ctx context.Context, cfg config.Config, store *models.Store, acc *accounts.Service, sh *shared, secret string, log *slog.Logger) (*accounts.SSO, error) {
	if !cfg.OIDC.Enabled() {
		return nil, nil
	}
	for _, domain := range slices.Sorted(maps.Keys(cfg.OIDC.Domains)) {
		id := cfg.OIDC.Domains[domain]
		if _, err := store.Organization(ctx, id); apperr.CodeOf(err) == apperr.NotFound {
			return nil, fmt.Errorf("SLUICE_OIDC_DOMAINS: %s=%d: there is no organization %d (create it first; its id is on the admin's organizations page)", domain, id, id)
		} else if err != nil {
			return nil, fmt.Errorf("SLUICE_OIDC_DOMAINS: read organization %d: %w", id, err)
		}
	}
	return accounts.NewSSO(ctx, accounts.SSOConfig{Issuer: cfg.OIDC.Issuer, ClientID: cfg.OIDC.ClientID, ClientSecret: cfg.OIDC.ClientSecret,
		RedirectURL: cfg.RedirectURL(), Domains: cfg.OIDC.Domains}, acc, sh.ssoFlows, []byte(secret), log)
}
