package models

import (
	"context"
	"time"
)

// Role is what a user may do: members use their organization, owners manage
// it, admins manage Sluice.
type Role string

// The roles.
const (
	RoleMember Role = "member"
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
)

// User is a person who signs in to the dashboard.
type User struct {
	ID           int64
	OrgID        int64
	Email        string
	PasswordHash string
	Role         Role
	CreatedAt    time.Time
}

// IsAdmin says whether the user may use the admin pages and API.
func (u User) IsAdmin() bool { return u.Role == RoleAdmin }

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
