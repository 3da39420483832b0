package models

import (
	"context"
	"time"
)

// LoginSession is one sign-in: the row that keeps a session JWT good until
// it expires or is ended. ID is the hex SHA-256 of the JWT's jti, so the
// table alone names no usable session.
type LoginSession struct {
	ID        string
	UserID    int64
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

// LoginSessionUser returns the user of an open session: not revoked and
// belonging to userID. A session that was ended, never started or whose
// user is gone is not found.
func (s *Store) LoginSessionUser(ctx context.Context, id string, userID int64) (User, error) {
	var u User
	err := s.db.WithContext(ctx).Table("users").Select("users.*").
		Joins("JOIN login_sessions ON login_sessions.user_id = users.id").
		Where("login_sessions.id = ? AND users.id = ? AND login_sessions.revoked_at IS NULL", id, userID).
		Take(&u).Error
	return u, dbErr(err, "session")
}

// RevokeLoginSession ends one of userID's sessions at the given time; from
// then on LoginSessionUser does not find it, on every node. Ending a
// session twice, or one that is unknown, is harmless.
func (s *Store) RevokeLoginSession(ctx context.Context, id string, userID int64, at time.Time) error {
	err := s.db.WithContext(ctx).Model(&LoginSession{}).
		Where("id = ? AND user_id = ? AND revoked_at IS NULL", id, userID).
		Update("revoked_at", at.UTC()).Error
	return dbErr(err, "session")
}
