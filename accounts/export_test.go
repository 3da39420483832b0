package accounts

import (
	"time"

	"github.com/sluicehq/sluice/models"
)

// Issue signs a session token for u without recording it, so tests can
// show that Resume refuses what Start did not record.
func (s *Sessions) Issue(u models.User) (token string, expires time.Time, err error) {
	token, claims, err := s.issue(u)
	if err != nil {
		return "", time.Time{}, err
	}
	return token, claims.ExpiresAt.Time, nil
}
