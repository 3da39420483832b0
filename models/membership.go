package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// Membership is a user's place in an organization: member or owner. An
// organization always keeps at least one owner.
type Membership struct {
	OrgID     int64 `gorm:"primaryKey"`
	UserID    int64 `gorm:"primaryKey"`
	Role      Role
	CreatedAt time.Time
}

// OrgMember is one member as their organization's list shows them.
type OrgMember struct {
	UserID   int64
	Email    string
	Role     Role
	JoinedAt time.Time
}

// UserOrganization is one of a user's organizations, for the switcher.
type UserOrganization struct {
	ID       int64
	Name     string
	Tier     string
	Role     Role
	JoinedAt time.Time
}

// Members lists an organization's members, owners first, then by when they
// joined.
func (s *Store) Members(ctx context.Context, orgID int64) ([]OrgMember, error) {
	var out []OrgMember
	err := s.db.WithContext(ctx).Table("memberships m").
		Select("m.user_id, u.email, m.role, m.created_at AS joined_at").
		Joins("JOIN users u ON u.id = m.user_id").
		Where("m.org_id = ?", orgID).
		Order("CASE m.role WHEN 'owner' THEN 0 ELSE 1 END, m.created_at, m.user_id").Scan(&out).Error
	for i := range out {
		out[i].JoinedAt = out[i].JoinedAt.UTC()
	}
	return out, dbErr(err, "members")
}

// UserOrganizations lists the organizations userID belongs to, in the order
// they joined them.
func (s *Store) UserOrganizations(ctx context.Context, userID int64) ([]UserOrganization, error) {
	var out []UserOrganization
	err := s.db.WithContext(ctx).Table("memberships m").
		Select("o.id, o.name, t.name AS tier, m.role, m.created_at AS joined_at").
		Joins("JOIN organizations o ON o.id = m.org_id").
		Joins("JOIN tiers t ON t.id = o.tier_id").
		Where("m.user_id = ?", userID).
		Order("m.created_at, o.id").Scan(&out).Error
	for i := range out {
		out[i].JoinedAt = out[i].JoinedAt.UTC()
	}
	return out, dbErr(err, "organizations")
}

// Membership returns u acting in orgID; a user who does not belong to it
// is not found, whatever the organization.
func (s *Store) Membership(ctx context.Context, u User, orgID int64) (Member, error) {
	var m Membership
	err := s.db.WithContext(ctx).Where("org_id = ? AND user_id = ?", orgID, u.ID).Take(&m).Error
	if err != nil {
		return Member{User: u}, dbErr(err, "organization")
	}
	return Member{User: u, OrgID: m.OrgID, Role: m.Role}, nil
}

// StartingMember is u acting where a new sign-in starts: the organization
// they last worked in while they still belong to it, else the one they
// joined first; without any, a Member of no organization.
func (s *Store) StartingMember(ctx context.Context, u User) (Member, error) {
	var ms []Membership
	err := s.db.WithContext(ctx).Raw(`SELECT * FROM memberships WHERE user_id = ?
		ORDER BY CASE WHEN org_id = ? THEN 0 ELSE 1 END, created_at, org_id LIMIT 1`, u.ID, u.LastOrgID).Scan(&ms).Error
	if err != nil || len(ms) == 0 {
		return Member{User: u}, dbErr(err, "memberships")
	}
	return Member{User: u, OrgID: ms[0].OrgID, Role: ms[0].Role}, nil
}

// lockOrganization takes orgID's row for the rest of tx, so the changes
// that must see every other one of the organization's (its owners, its
// pending invitations) run one at a time: on Postgres FOR NO KEY UPDATE,
// which the same changes wait for and foreign-key checks of usage and
// tokens do not; on SQLite the one writer already runs them one at a
// time. A missing organization is not found.
func lockOrganization(tx *gorm.DB, orgID int64) error {
	q := `SELECT id FROM organizations WHERE id = ?`
	if tx.Dialector.Name() == "postgres" {
		q += ` FOR NO KEY UPDATE`
	}
	var ids []int64
	if err := tx.Raw(q, orgID).Scan(&ids).Error; err != nil {
		return dbErr(err, "organization")
	}
	if len(ids) == 0 {
		return apperr.New(apperr.NotFound, "organization not found")
	}
	return nil
}

// requireOwner checks, inside tx (after lockOrganization where an
// invariant rests on it), that actor is still an owner of their
// organization: what their session said at the start of the request may
// have changed since.
func requireOwner(tx *gorm.DB, actor Member, what string) error {
	var n int64
	err := tx.Model(&Membership{}).Where("org_id = ? AND user_id = ? AND role = ?", actor.OrgID, actor.ID, RoleOwner).Count(&n).Error
	if err != nil {
		return dbErr(err, "membership")
	}
	if n == 0 {
		return ownersOnly(what)
	}
	return nil
}

// ownersOnly is the refusal of a member (or a former owner) doing an
// owner's work.
func ownersOnly(what string) error {
	return apperr.WithReason(apperr.Forbidden, "owner_required", "only the organization's owners may "+what)
}

// lastOwner refuses a change that would leave an organization without an
// owner, counting inside tx after lockOrganization.
func lastOwner(tx *gorm.DB, orgID int64, what string) error {
	var owners int64
	if err := tx.Model(&Membership{}).Where("org_id = ? AND role = ?", orgID, RoleOwner).Count(&owners).Error; err != nil {
		return dbErr(err, "memberships")
	}
	if owners <= 1 {
		return apperr.WithReason(apperr.Conflict, "last_owner",
			"an organization must keep an owner: make another member an owner before "+what)
	}
	return nil
}

// member reads one membership of orgID with its email, inside tx.
func member(tx *gorm.DB, orgID, userID int64) (OrgMember, error) {
	var out []OrgMember
	err := tx.Table("memberships m").Select("m.user_id, u.email, m.role, m.created_at AS joined_at").
		Joins("JOIN users u ON u.id = m.user_id").
		Where("m.org_id = ? AND m.user_id = ?", orgID, userID).Scan(&out).Error
	if err != nil {
		return OrgMember{}, dbErr(err, "member")
	}
	if len(out) == 0 {
		return OrgMember{}, apperr.WithReason(apperr.NotFound, "member_not_found", "no such member of this organization")
	}
	out[0].JoinedAt = out[0].JoinedAt.UTC()
	return out[0], nil
}

// SetMemberRole makes a member of actor's organization a member or an
// owner, audited. Only owners may; demoting the last owner is refused,
// also when two owners demote each other at once: the organization's row
// is locked first, so the second change counts the owners the first left.
func (s *Store) SetMemberRole(ctx context.Context, actor Member, userID int64, role Role) (OrgMember, error) {
	if !ValidMembershipRole(role) {
		return OrgMember{}, apperr.Field(apperr.Unprocessable, "invalid_role", "role", `role must be "member" or "owner"`)
	}
	var m OrgMember
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockOrganization(tx, actor.OrgID); err != nil {
			return err
		}
		if err := requireOwner(tx, actor, "change members' roles"); err != nil {
			return err
		}
		var err error
		if m, err = member(tx, actor.OrgID, userID); err != nil {
			return err
		}
		if m.Role == role {
			return nil
		}
		if m.Role == RoleOwner {
			if err := lastOwner(tx, actor.OrgID, "making "+m.Email+" a member"); err != nil {
				return err
			}
		}
		err = tx.Model(&Membership{}).Where("org_id = ? AND user_id = ?", actor.OrgID, userID).Update("role", role).Error
		if err != nil {
			return dbErr(err, "membership")
		}
		before := m.Role
		m.Role = role
		return audit(tx, actor.OrgID, actor.ID, "member.role", fmt.Sprint(userID), fmt.Sprintf("%s: %s -> %s", m.Email, before, role))
	})
	return m, dbErr(err, "member")
}

// Removal is what removing a member ended: their membership, their
// sessions in the organization and the API tokens they made in it.
type Removal struct {
	Member OrgMember
	// TokenHashes are the hashes of the tokens revoked, for the gateway's
	// caches to forget.
	TokenHashes   []string
	SessionsEnded int64
}

// RemoveMember takes userID out of actor's organization, audited: owners
// remove anyone, a member only themselves (leaving). In the same
// transaction their sessions acting in the organization end and the API
// tokens they created in it are revoked; the last owner cannot go.
func (s *Store) RemoveMember(ctx context.Context, actor Member, userID int64) (Removal, error) {
	var r Removal
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockOrganization(tx, actor.OrgID); err != nil {
			return err
		}
		if userID != actor.ID {
			if err := requireOwner(tx, actor, "remove members"); err != nil {
				return err
			}
		}
		var err error
		if r.Member, err = member(tx, actor.OrgID, userID); err != nil {
			return err
		}
		if r.Member.Role == RoleOwner {
			what := "removing " + r.Member.Email
			if userID == actor.ID {
				what = "leaving"
			}
			if err := lastOwner(tx, actor.OrgID, what); err != nil {
				return err
			}
		}
		if err := tx.Where("org_id = ? AND user_id = ?", actor.OrgID, userID).Delete(&Membership{}).Error; err != nil {
			return dbErr(err, "membership")
		}
		now := s.now().UTC()
		res := tx.Model(&LoginSession{}).Where("user_id = ? AND org_id = ? AND revoked_at IS NULL", userID, actor.OrgID).
			Update("revoked_at", now)
		if res.Error != nil {
			return dbErr(res.Error, "sessions")
		}
		r.SessionsEnded = res.RowsAffected
		toks, err := revokeTokens(tx, now, "org_id = ? AND user_id = ?", actor.OrgID, userID)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if err := audit(tx, actor.OrgID, actor.ID, "token.revoke", fmt.Sprint(t.ID), t.Name+" (its member was removed)"); err != nil {
				return err
			}
			r.TokenHashes = append(r.TokenHashes, t.Hash)
		}
		action := "member.remove"
		if userID == actor.ID {
			action = "member.leave"
		}
		return audit(tx, actor.OrgID, actor.ID, action, fmt.Sprint(userID), fmt.Sprintf("%s (%s): %d sessions ended, %d tokens revoked",
			r.Member.Email, r.Member.Role, r.SessionsEnded, len(toks)))
	})
	return r, dbErr(err, "member")
}

// revokeTokens revokes, inside tx, the active API tokens that where (with
// args) selects, and returns them: their hashes are for the gateways to
// forget.
func revokeTokens(tx *gorm.DB, now time.Time, where string, args ...any) ([]APIToken, error) {
	var toks []APIToken
	if err := tx.Where(where, args...).Where("revoked_at IS NULL").Find(&toks).Error; err != nil {
		return nil, dbErr(err, "tokens")
	}
	if len(toks) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	if err := tx.Model(&APIToken{}).Where("id IN ?", ids).Update("revoked_at", now).Error; err != nil {
		return nil, dbErr(err, "tokens")
	}
	return toks, nil
}

// addMembership makes userID a member of orgID with role inside tx; one
// already there is a conflict saying so.
func addMembership(tx *gorm.DB, orgID, userID int64, role Role, at time.Time) error {
	err := tx.Create(&Membership{OrgID: orgID, UserID: userID, Role: role, CreatedAt: at}).Error
	if err := dbErr(err, "membership"); apperr.CodeOf(err) == apperr.Conflict {
		return apperr.WithReason(apperr.Conflict, "already_member", "you are already a member of this organization")
	} else if err != nil {
		return err
	}
	return nil
}

// OrganizationAPIToken returns one of orgID's tokens, whoever made it;
// another organization's is not found.
func (s *Store) OrganizationAPIToken(ctx context.Context, orgID, id int64) (APIToken, error) {
	var t APIToken
	err := s.db.WithContext(ctx).Where("org_id = ? AND id = ?", orgID, id).Take(&t).Error
	return t, dbErr(err, "token")
}
