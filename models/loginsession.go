package models

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// LoginSession is one sign-in: the row that keeps a session JWT good until
// it expires or is ended. ID is the hex SHA-256 of the JWT's jti, so the
// table alone names no usable session. OrgID is the organization the
// session acts in, which its user may switch; nil when they belong to none.
type LoginSession struct {
	ID        string
	UserID    int64
	OrgID     *int64
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
}

// CreateLoginSession records a new session, and deletes the sessions that
// expired before it started: they can no longer be presented, so their rows
// only take room.
func (s *Store) CreateLoginSession(ctx context.Context, ls LoginSession) error {
	db := s.db.WithContext(ctx)
	if err := db.Where("expires_at < ?", ls.CreatedAt.UTC()).Delete(&LoginSession{}).Error; err != nil {
		return dbErr(err, "expired sessions")
	}
	ls.CreatedAt, ls.ExpiresAt = ls.CreatedAt.UTC(), ls.ExpiresAt.UTC()
	return dbErr(db.Create(&ls).Error, "session")
}

// sessionRow is a session's user with the organization it acts in and
// the user's role there, read in one query.
type sessionRow struct {
	User
	SessionOrgID *int64
	MemberRole   *Role
}

// LoginSessionMember returns who an open session is: its user (not
// revoked, belonging to userID) acting in the session's organization with
// their role there. A session that was ended, never started, whose user is
// gone or disabled, or whose user no longer belongs to its organization is
// not found.
func (s *Store) LoginSessionMember(ctx context.Context, id string, userID int64) (Member, error) {
	var rows []sessionRow
	err := s.db.WithContext(ctx).Table("users").
		Select("users.*, login_sessions.org_id AS session_org_id, memberships.role AS member_role").
		Joins("JOIN login_sessions ON login_sessions.user_id = users.id").
		Joins("LEFT JOIN memberships ON memberships.org_id = login_sessions.org_id AND memberships.user_id = users.id").
		// A disabled user's sessions were ended; this is the belt to those braces.
		Where("login_sessions.id = ? AND users.id = ? AND login_sessions.revoked_at IS NULL AND users.disabled_at IS NULL", id, userID).
		Scan(&rows).Error
	if err != nil {
		return Member{}, dbErr(err, "session")
	}
	if len(rows) == 0 {
		return Member{}, apperr.New(apperr.NotFound, "session not found")
	}
	r := rows[0]
	m := Member{User: r.User}
	switch {
	case r.SessionOrgID == nil: // the user belongs to no organization
	case r.MemberRole == nil: // removed from it: RemoveMember ends such sessions, this is the belt to its braces
		return Member{}, apperr.New(apperr.NotFound, "session not found")
	default:
		m.OrgID, m.Role = *r.SessionOrgID, *r.MemberRole
	}
	return m, nil
}

// SetLoginSessionOrganization makes an open session of u's act in orgID
// from its next request on, and orgID where u's next sign-in starts. An
// organization u does not belong to is not found, as is a session that
// ended.
func (s *Store) SetLoginSessionOrganization(ctx context.Context, id string, u User, orgID int64) (Member, error) {
	var m Member
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ms []Membership
		if err := tx.Where("org_id = ? AND user_id = ?", orgID, u.ID).Find(&ms).Error; err != nil {
			return dbErr(err, "membership")
		}
		if len(ms) == 0 {
			return apperr.WithReason(apperr.NotFound, "organization_not_found", "no such organization among yours")
		}
		res := tx.Model(&LoginSession{}).Where("id = ? AND user_id = ? AND revoked_at IS NULL", id, u.ID).Update("org_id", orgID)
		if res.Error != nil {
			return dbErr(res.Error, "session")
		}
		if res.RowsAffected == 0 {
			return apperr.New(apperr.NotFound, "session not found")
		}
		if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("org_id", orgID).Error; err != nil {
			return dbErr(err, "user")
		}
		u.LastOrgID = orgID
		m = Member{User: u, OrgID: orgID, Role: ms[0].Role}
		return nil
	})
	return m, dbErr(err, "session")
}

// RevokeLoginSession ends one of userID's sessions at the given time; from
// then on LoginSessionMember does not find it, on every node. Ending a
// session twice, or one that is unknown, is harmless.
func (s *Store) RevokeLoginSession(ctx context.Context, id string, userID int64, at time.Time) error {
	err := s.db.WithContext(ctx).Model(&LoginSession{}).
		Where("id = ? AND user_id = ? AND revoked_at IS NULL", id, userID).
		Update("revoked_at", at.UTC()).Error
	return dbErr(err, "session")
}
