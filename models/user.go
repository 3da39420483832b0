package models

import (
	"context"
	"time"
)

// Role is what a user may do: in an organization, members use it and
// owners manage it (a membership's role); across Sluice, admins manage
// Sluice (a user's AccountRole).
type Role string

// The roles.
const (
	RoleMember Role = "member"
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
)

// ValidMembershipRole says whether r is a role a membership may have.
func ValidMembershipRole(r Role) bool { return r == RoleMember || r == RoleOwner }

// User is a person who signs in. What they may do in an organization is
// their membership's (Member); a User alone names no organization to act
// in.
type User struct {
	ID           int64
	Email        string
	PasswordHash string
	// AccountRole is RoleAdmin for Sluice's operators and RoleMember for
	// everyone else; roles in organizations are memberships'.
	AccountRole Role `gorm:"column:role"`
	// LastOrgID is the organization the user last worked in (signed up
	// into, joined or switched to): where their next sign-in starts, while
	// they still belong to it.
	LastOrgID int64 `gorm:"column:org_id"`
	CreatedAt time.Time
	// DisabledAt is when an admin disabled the user (nil: enabled): they
	// cannot sign in, and neither their sessions nor their tokens work.
	DisabledAt *time.Time
	DisabledBy *int64
	// LastLoginAt is their last sign-in; nil for none that Sluice recorded.
	LastLoginAt *time.Time
	// EmailVerifiedAt is when the user showed they read mail at Email (a
	// verification link, a signup or reset link that was mailed); nil:
	// never.
	EmailVerifiedAt *time.Time
}

// Disabled says whether an admin has disabled the user.
func (u User) Disabled() bool { return u.DisabledAt != nil }

// IsAdmin says whether the user may use the admin pages and API.
func (u User) IsAdmin() bool { return u.AccountRole == RoleAdmin }

// Member is a user acting in one of their organizations: who a signed-in
// request is. OrgID is the session's current organization and Role the
// user's membership of it; both are zero for a user who belongs to no
// organization (removed from their last one).
type Member struct {
	User
	OrgID int64
	Role  Role
}

// IsOwner says whether the member manages the organization: its members,
// invitations, billing, budget, webhooks, upgrades and every token.
func (m Member) IsOwner() bool { return m.Role == RoleOwner }

// HasOrganization says whether the member acts in an organization at all.
func (m Member) HasOrganization() bool { return m.OrgID != 0 }

// UserByEmail finds a user by email, compared case-insensitively.
func (s *Store) UserByEmail(ctx context.Context, email string) (User, error) {
	var u User
	err := s.db.WithContext(ctx).Where("email = ?", NormalizeEmail(email)).Take(&u).Error
	return u, dbErr(err, "user")
}

// User returns a user by id.
func (s *Store) User(ctx context.Context, id int64) (User, error) {
	var u User
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&u).Error
	return u, dbErr(err, "user")
}

// AdminExists says whether any admin account exists, for bootstrapping.
func (s *Store) AdminExists(ctx context.Context) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&User{}).Where("role = ?", RoleAdmin).Count(&n).Error
	return n > 0, dbErr(err, "users")
}
