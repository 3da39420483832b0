package accounts

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
)

// DefaultDeletedOrgRetention is how long a deleted organization's data is
// kept for export before it is purged (SLUICE_DELETED_ORG_RETENTION).
const DefaultDeletedOrgRetention = 30 * 24 * time.Hour

// WithDeletedOrgRetention sets how long a deleted organization's data is
// kept before the purge; without it, DefaultDeletedOrgRetention.
func WithDeletedOrgRetention(d time.Duration) ServiceOption {
	return func(s *Service) { s.deletedOrgRetention = d }
}

func needAdmin(u models.User, what string) error {
	if !u.IsAdmin() {
		return apperr.New(apperr.Forbidden, "only admins may %s", what)
	}
	return nil
}

// AdminUsers is a page of every user, for admins.
func (s *Service) AdminUsers(ctx context.Context, admin models.User, q models.AdminUserQuery) ([]models.AdminUser, int64, error) {
	if err := needAdmin(admin, "list users"); err != nil {
		return nil, 0, err
	}
	return s.store.AdminUsers(ctx, q)
}

// DisableUser disables a user (models.Store.DisableUser): their sessions
// end and every node's gateway forgets the tokens they created, whose next
// request is refused with user_disabled.
func (s *Service) DisableUser(ctx context.Context, admin models.User, userID int64) (models.UserSwitch, error) {
	if err := needAdmin(admin, "disable users"); err != nil {
		return models.UserSwitch{}, err
	}
	sw, err := s.store.DisableUser(ctx, admin, userID)
	if err == nil {
		s.forgetTokens(ctx, sw.TokenHashes...)
	}
	return sw, err
}

// EnableUser enables a disabled user again; the tokens they created that
// were not revoked work again from their next request, on every node.
func (s *Service) EnableUser(ctx context.Context, admin models.User, userID int64) (models.UserSwitch, error) {
	if err := needAdmin(admin, "enable users"); err != nil {
		return models.UserSwitch{}, err
	}
	sw, err := s.store.EnableUser(ctx, admin, userID)
	if err == nil {
		s.forgetTokens(ctx, sw.TokenHashes...)
	}
	return sw, err
}

// DeleteOrganization deletes an organization (models.Store.DeleteOrganization):
// its members leave it, their sessions in it end, and every node's gateway
// forgets its tokens, whose next request is refused with
// organization_deleted. Its data is purged after the retention.
func (s *Service) DeleteOrganization(ctx context.Context, admin models.User, orgID int64) (models.OrgDeletion, error) {
	if err := needAdmin(admin, "delete organizations"); err != nil {
		return models.OrgDeletion{}, err
	}
	d, err := s.store.DeleteOrganization(ctx, admin, orgID, s.store.Now().Add(s.deletedOrgRetention))
	if err == nil {
		s.dir.ForgetOrganization(orgID)
		s.publish(ctx, cluster.Event{Kind: cluster.OrgChanged, ID: orgID})
	}
	return d, err
}

// errAccountDisabled is a disabled user's sign-in with the right password:
// said only to someone who knows it.
var errAccountDisabled = apperr.WithReason(apperr.Forbidden, "account_disabled",
	"this account has been disabled by an administrator; ask them to enable it")

// DeletedOrgRetention is how long a deleted organization's data is kept
// for export before the purge.
func (s *Service) DeletedOrgRetention() time.Duration { return s.deletedOrgRetention }
