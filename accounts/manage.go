package accounts

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// MaxTokenDays bounds an API token's optional lifetime.
const MaxTokenDays = 3650

// CreateToken issues an API token for u's organization; expiresInDays 0
// means it never expires. The plain text is returned once.
func (s *Service) CreateToken(ctx context.Context, u models.User, name string, expiresInDays int) (models.APIToken, string, error) {
	name = strings.TrimSpace(name)
	if expiresInDays < 0 || expiresInDays > MaxTokenDays {
		return models.APIToken{}, "", apperr.New(apperr.Unprocessable, "expires_in_days must be from 0 (never) to %d", MaxTokenDays)
	}
	var expires *time.Time
	if expiresInDays > 0 {
		t := time.Now().UTC().AddDate(0, 0, expiresInDays)
		expires = &t
	}
	return s.store.CreateAPIToken(ctx, u.OrgID, u.ID, name, expires)
}

// RevokeToken revokes one of u's organization's tokens and makes the
// gateway forget it at once.
func (s *Service) RevokeToken(ctx context.Context, u models.User, id int64) (models.APIToken, error) {
	t, err := s.store.RevokeAPIToken(ctx, u, u.OrgID, id)
	if err == nil {
		s.dir.ForgetToken(t.Hash)
	}
	return t, err
}

// UpdateTier changes a tier's limits; the next API request uses them.
func (s *Service) UpdateTier(ctx context.Context, admin models.User, name string, l models.TierLimits) (models.Tier, error) {
	if !admin.IsAdmin() {
		return models.Tier{}, apperr.New(apperr.Forbidden, "only admins may change tiers")
	}
	t, err := s.store.UpdateTierLimits(ctx, admin, name, l)
	if err != nil {
		return t, err
	}
	return t, s.dir.ReloadTiers(ctx)
}

// SetOrganizationTier moves an organization to a tier; its tokens' next
// requests use the new limits.
func (s *Service) SetOrganizationTier(ctx context.Context, admin models.User, orgID int64, tier string) (models.Organization, error) {
	if !admin.IsAdmin() {
		return models.Organization{}, apperr.New(apperr.Forbidden, "only admins may change an organization's tier")
	}
	o, err := s.store.SetOrganizationTier(ctx, admin, orgID, tier)
	if err == nil {
		s.dir.ForgetOrganization(orgID)
	}
	return o, err
}
