package testdb

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/models"
)

// AddMember makes a user of email (with passwordHash, a bcrypt hash or any
// text a test never signs in with) a member of orgID with role, as an
// accepted invitation would, and returns them acting there. Tests use it
// to set up a cast; the invitation flow has tests of its own.
func AddMember(t testing.TB, db *models.DB, orgID int64, email, passwordHash string, role models.Role) models.Member {
	t.Helper()
	now := time.Now().UTC()
	u := models.User{Email: models.NormalizeEmail(email), PasswordHash: passwordHash, AccountRole: models.RoleMember, LastOrgID: orgID, CreatedAt: now}
	if err := db.Gorm.Create(&u).Error; err != nil {
		t.Fatalf("add member %s: %v", email, err)
	}
	if err := db.Gorm.Create(&models.Membership{OrgID: orgID, UserID: u.ID, Role: role, CreatedAt: now}).Error; err != nil {
		t.Fatalf("add membership of %s: %v", email, err)
	}
	return models.Member{User: u, OrgID: orgID, Role: role}
}
