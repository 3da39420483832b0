package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// AdminUsersMaxLimit bounds a page of the admin's user list.
const AdminUsersMaxLimit = 200

// AdminUserQuery is a page of the admin's user list: users whose email
// contains Search (case-insensitive; "" for all), by id, after Cursor (the
// last id of the page before; 0 for the first), at most Limit of them.
type AdminUserQuery struct {
	Search string
	Limit  int
	Cursor int64
}

// AdminUser is one user as the admin's list shows them.
type AdminUser struct {
	ID          int64
	Email       string
	Admin       bool
	DisabledAt  *time.Time
	LastLoginAt *time.Time
	CreatedAt   time.Time
	Orgs        []AdminUserOrg // by name
}

// AdminUserOrg is one of a user's organizations with their role in it.
type AdminUserOrg struct {
	ID   int64
	Name string
	Role Role
}

// AdminUsers returns a page of users and the cursor of the next page (0
// when this is the last). The cursor is the last id shown, so a page
// stays put while users sign up.
func (s *Store) AdminUsers(ctx context.Context, q AdminUserQuery) ([]AdminUser, int64, error) {
	if q.Limit < 1 || q.Limit > AdminUsersMaxLimit {
		return nil, 0, apperr.Field(apperr.Invalid, "invalid_limit", "limit", fmt.Sprintf("limit must be from 1 to %d", AdminUsersMaxLimit))
	}
	db := s.db.WithContext(ctx).Model(&User{}).Where("id > ?", q.Cursor)
	if search := strings.TrimSpace(q.Search); search != "" {
		db = db.Where(`lower(email) LIKE ? ESCAPE '\'`, "%"+escapeLike(strings.ToLower(search))+"%")
	}
	var users []User
	if err := db.Order("id").Limit(q.Limit + 1).Find(&users).Error; err != nil {
		return nil, 0, dbErr(err, "users")
	}
	var next int64
	if len(users) > q.Limit {
		users = users[:q.Limit]
		next = users[len(users)-1].ID
	}
	out := make([]AdminUser, len(users))
	ids := make([]int64, len(users))
	index := make(map[int64]int, len(users))
	for i, u := range users {
		out[i] = AdminUser{ID: u.ID, Email: u.Email, Admin: u.IsAdmin(), DisabledAt: utc(u.DisabledAt), LastLoginAt: utc(u.LastLoginAt),
			CreatedAt: u.CreatedAt.UTC()}
		ids[i], index[u.ID] = u.ID, i
	}
	if len(ids) > 0 {
		var rows []struct {
			UserID int64
			AdminUserOrg
		}
		err := s.db.WithContext(ctx).Table("memberships m").Select("m.user_id, o.id, o.name, m.role").
			Joins("JOIN organizations o ON o.id = m.org_id").
			Where("m.user_id IN ?", ids).Order("o.name, o.id").Scan(&rows).Error
		if err != nil {
			return nil, 0, dbErr(err, "memberships")
		}
		for _, r := range rows {
			i := index[r.UserID]
			out[i].Orgs = append(out[i].Orgs, r.AdminUserOrg)
		}
	}
	return out, next, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// UserSwitch is what disabling or enabling a user changed: the sessions
// ended, and the hashes of the tokens they created that are not revoked,
// which every node's token cache must forget (they stop, or work again).
type UserSwitch struct {
	User          User
	SessionsEnded int64
	TokenHashes   []string
}

// DisableUser disables userID, audited: they cannot sign in, every session
// of theirs ends, and the API tokens they created stop (Authenticate
// refuses a disabled user's token; the caller has the caches forget them).
// An admin cannot disable themselves, nor the last enabled admin: the
// enabled admins' rows are locked first, so two admins disabling each
// other at once leave one.
func (s *Store) DisableUser(ctx context.Context, actor User, userID int64) (UserSwitch, error) {
	var sw UserSwitch
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if userID == actor.ID {
			return apperr.WithReason(apperr.Conflict, "cannot_disable_self", "you cannot disable your own account")
		}
		// The admins first, then the user, in every disable: one order of
		// locks, so two disables at once wait for each other and never
		// deadlock.
		admins, err := lockEnabledAdmins(tx)
		if err != nil {
			return err
		}
		u, err := lockUser(tx, userID)
		if err != nil {
			return err
		}
		if u.Disabled() {
			return apperr.WithReason(apperr.Conflict, "user_disabled", u.Email+" is already disabled")
		}
		if u.IsAdmin() {
			if admins <= 1 {
				return apperr.WithReason(apperr.Conflict, "last_admin", "Sluice must keep an enabled admin: "+u.Email+" is the last one")
			}
		}
		now := s.now().UTC()
		if err := tx.Model(&User{}).Where("id = ?", userID).Updates(map[string]any{"disabled_at": now, "disabled_by": actor.ID}).Error; err != nil {
			return dbErr(err, "user")
		}
		res := tx.Model(&LoginSession{}).Where("user_id = ? AND revoked_at IS NULL AND expires_at > ?", userID, now).Update("revoked_at", now)
		if res.Error != nil {
			return dbErr(res.Error, "sessions")
		}
		if sw.TokenHashes, err = liveTokenHashes(tx, "user_id = ?", userID); err != nil {
			return err
		}
		u.DisabledAt, u.DisabledBy = &now, &actor.ID
		sw.User, sw.SessionsEnded = u, res.RowsAffected
		return audit(tx, 0, actor.ID, "user.disable", fmt.Sprint(userID), fmt.Sprintf("%s: %d sessions ended, %d tokens stopped",
			u.Email, sw.SessionsEnded, len(sw.TokenHashes)))
	})
	return sw, dbErr(err, "user")
}

// EnableUser enables a disabled user again, audited: they may sign in, and
// the tokens they created that were not revoked meanwhile work again.
func (s *Store) EnableUser(ctx context.Context, actor User, userID int64) (UserSwitch, error) {
	var sw UserSwitch
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		u, err := lockUser(tx, userID)
		if err != nil {
			return err
		}
		if !u.Disabled() {
			return apperr.WithReason(apperr.Conflict, "user_enabled", u.Email+" is not disabled")
		}
		if err := tx.Model(&User{}).Where("id = ?", userID).Updates(map[string]any{"disabled_at": nil, "disabled_by": nil}).Error; err != nil {
			return dbErr(err, "user")
		}
		if sw.TokenHashes, err = liveTokenHashes(tx, "user_id = ?", userID); err != nil {
			return err
		}
		u.DisabledAt, u.DisabledBy = nil, nil
		sw.User = u
		return audit(tx, 0, actor.ID, "user.enable", fmt.Sprint(userID), fmt.Sprintf("%s: %d tokens work again", u.Email, len(sw.TokenHashes)))
	})
	return sw, dbErr(err, "user")
}

// RecordLogin notes a user's sign-in at at, for the admin's list.
func (s *Store) RecordLogin(ctx context.Context, userID int64, at time.Time) error {
	return dbErr(s.db.WithContext(ctx).Model(&User{}).Where("id = ?", userID).Update("last_login_at", at.UTC()).Error, "user")
}

// lockUser reads userID's row inside tx, locked on Postgres.
func lockUser(tx *gorm.DB, userID int64) (User, error) {
	var u User
	err := lockedForUpdate(tx).Where("id = ?", userID).Take(&u).Error
	return u, dbErr(err, "user")
}

// lockEnabledAdmins locks the rows of the enabled admins inside tx and
// counts them. On Postgres a waiting transaction re-reads the rows a
// finished one changed, so it counts what that one left; SQLite's one
// writer runs them one at a time anyway.
func lockEnabledAdmins(tx *gorm.DB) (int, error) {
	var ids []int64
	err := lockedForUpdate(tx.Model(&User{})).Where("role = ? AND disabled_at IS NULL", RoleAdmin).Order("id").Pluck("id", &ids).Error
	return len(ids), dbErr(err, "admins")
}

// liveTokenHashes are the hashes of the tokens matching where that are not
// revoked, inside tx.
func liveTokenHashes(tx *gorm.DB, where string, args ...any) ([]string, error) {
	var hashes []string
	err := tx.Model(&APIToken{}).Where(where, args...).Where("revoked_at IS NULL").Pluck("hash", &hashes).Error
	return hashes, dbErr(err, "tokens")
}
