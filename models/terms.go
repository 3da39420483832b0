package models

import (
	"context"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sluicehq/sluice/money"
)

// TierTerms is one version of what a tier charges: its monthly fee,
// included credit and overage, in force from EffectiveFrom (a whole
// second, UTC) until the next version. Versions are never changed; an
// edit adds one from its moment on, so the part of a month before it keeps
// the terms it had.
type TierTerms struct {
	ID             int64
	TierID         int64
	TierName       string // the tier's name, which never changes; kept for a tier deleted since
	MonthlyFee     money.Amount
	IncludedCredit money.Amount
	Overage        string
	EffectiveFrom  time.Time
	CreatedBy      *int64
}

// TableName is the versions' table.
func (TierTerms) TableName() string { return "tier_terms" }

// TierMembership records an organization's being on a tier from
// EffectiveFrom until its next membership: one at its creation, one for
// each move.
type TierMembership struct {
	ID            int64
	OrgID         int64
	TierID        int64
	EffectiveFrom time.Time
	CreatedBy     *int64
}

// terms are the tier's current terms as a new version.
func (t Tier) terms(actor User, at time.Time) TierTerms {
	v := TierTerms{TierID: t.ID, TierName: t.Name, MonthlyFee: t.MonthlyFee, IncludedCredit: t.IncludedCredit, Overage: t.Overage,
		EffectiveFrom: at}
	if actor.ID != 0 {
		v.CreatedBy = &actor.ID
	}
	return v
}

// sameTerms says whether two tiers charge the same.
func sameTerms(a, b Tier) bool {
	return a.MonthlyFee == b.MonthlyFee && a.IncludedCredit == b.IncludedCredit && a.Overage == b.Overage
}

// lockedForUpdate is q taking a row lock on what it reads, on Postgres, so
// two edits of one row are applied one after the other. SQLite needs
// none: its one writer runs transactions one at a time.
func lockedForUpdate(q *gorm.DB) *gorm.DB {
	if q.Dialector.Name() == "postgres" {
		return q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return q
}

// joinTier records, inside tx, that orgID is on tierID from now on (the
// store's clock, to the second: what invoices count in), never before its
// latest membership, so the history stays in order when nodes' clocks
// disagree. It is a no-op when tierID is the tier the organization was
// already on (from); the caller has locked the organization's row.
func (s *Store) joinTier(tx *gorm.DB, actor User, orgID, from, tierID int64) error {
	if from == tierID {
		return nil
	}
	at := s.now().UTC().Truncate(time.Second)
	var last TierMembership
	err := tx.Where("org_id = ?", orgID).Order("effective_from DESC, id DESC").Limit(1).Find(&last).Error
	if err != nil {
		return dbErr(err, "tier membership")
	}
	if last.ID != 0 && last.EffectiveFrom.After(at) {
		at = last.EffectiveFrom
	}
	m := TierMembership{OrgID: orgID, TierID: tierID, EffectiveFrom: at}
	if actor.ID != 0 {
		m.CreatedBy = &actor.ID
	}
	return dbErr(tx.Create(&m).Error, "tier membership")
}

func ptr[T any](v T) *T { return &v }

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Span is a stretch of time from From up to To (excluded), in whole
// seconds.
type Span struct{ From, To time.Time }

// Seconds is how long the span is.
func (s Span) Seconds() int64 { return s.To.Unix() - s.From.Unix() }

// TermsInForce is one (tier, terms version) pair and when, within a month,
// it was in force for an organization.
type TermsInForce struct {
	Terms   TierTerms
	Spans   []Span // in order, none empty, none touching another
	Seconds int64  // their total
}

// MonthTerms is what an organization's tiers charged over one calendar
// month (UTC): each (tier, terms version) pair in force for part of it,
// in the order they first came into force. A month still running counts
// the current pair until its end, as if nothing changed any more.
type MonthTerms struct {
	Period  time.Time // the month's first instant
	Seconds int64     // in the month
	Terms   []TermsInForce
	// CreditWithheld says the organization gets no included credit: its
	// tier's credit needs a verified email and none of its owners has one
	// (Tier.CreditNeedsVerifiedEmail). IncludedCredit is then 0 and the
	// invoice has no credit lines.
	CreditWithheld bool
}

// IncludedCredit is the month's included credit: each pair's credit for
// the share of the month it was in force, Σ credit × seconds / seconds of
// the month, exactly, rounded down to the picodollar once.
func (m MonthTerms) IncludedCredit() money.Amount {
	if m.CreditWithheld {
		return 0
	}
	p := money.NewProration(m.Seconds)
	for _, t := range m.Terms {
		p.Add(t.Terms.IncludedCredit, t.Seconds)
	}
	return p.Amount()
}

// MonthTerms returns what orgID's tiers charged over the month containing
// period, from its memberships and the tiers' versions.
func (s *Store) MonthTerms(ctx context.Context, orgID int64, period time.Time) (MonthTerms, error) {
	db := s.db.WithContext(ctx)
	m, err := monthTerms(db, orgID, MonthOf(period))
	if err != nil || !s.emailVerification {
		return m, err
	}
	m.CreditWithheld, err = creditWithheld(db, orgID)
	return m, err
}

// creditWithheld says whether orgID's tier withholds its included credit
// until an owner's email is verified, and no owner's is. Owners are read
// from memberships: any owner's verified address will do.
func creditWithheld(db *gorm.DB, orgID int64) (bool, error) {
	var rows []struct {
		Needs    bool
		Verified int64
	}
	err := db.Raw(`SELECT tiers.credit_needs_verified_email AS needs,
			(SELECT COUNT(*) FROM memberships JOIN users ON users.id = memberships.user_id
			 WHERE memberships.org_id = organizations.id AND memberships.role = ? AND users.email_verified_at IS NOT NULL) AS verified
		FROM organizations JOIN tiers ON tiers.id = organizations.tier_id WHERE organizations.id = ?`, RoleOwner, orgID).Scan(&rows).Error
	if err != nil {
		return false, dbErr(err, "organization")
	}
	return len(rows) == 1 && rows[0].Needs && rows[0].Verified == 0, nil
}

// monthTerms cuts the month at every move of the organization and every
// new version of the tier it was on. Boundaries count in whole seconds
// (Unix time, rounded down), so two changes within one second leave the
// earlier one no time at all, and no pair with no time is listed. Time
// before the organization's first membership (before it existed) and
// before its tier's first version is in no pair: nothing is charged for it.
// Nor is time after the organization was deleted: its tier ends with it.
func monthTerms(db *gorm.DB, orgID int64, period time.Time) (MonthTerms, error) {
	end := period.AddDate(0, 1, 0)
	m := MonthTerms{Period: period, Seconds: end.Unix() - period.Unix()}
	var o Organization
	if err := db.Select("id", "tier_id", "created_at", "deleted_at").Where("id = ?", orgID).Take(&o).Error; err != nil {
		return m, dbErr(err, "organization")
	}
	stop := end.Unix() // when the last stretch ends
	if o.DeletedAt != nil {
		stop = min(stop, o.DeletedAt.Unix())
	}
	var ms []TierMembership
	err := db.Where("org_id = ? AND effective_from < ?", orgID, end).Order("effective_from, id").Find(&ms).Error
	if err != nil {
		return m, dbErr(err, "tier memberships")
	}
	if len(ms) == 0 && o.CreatedAt.Before(end) {
		// An organization written without one (by a tool, by hand) is on
		// its tier since its creation, as the migration assumed of all.
		ms = []TierMembership{{OrgID: orgID, TierID: o.TierID, EffectiveFrom: o.CreatedAt}}
	}
	type stretch struct{ tierID, from, to int64 }
	var on []stretch
	var tierIDs []int64
	for i, mb := range ms {
		to := stop
		if i+1 < len(ms) {
			to = min(to, ms[i+1].EffectiveFrom.Unix())
		}
		if from := max(mb.EffectiveFrom.Unix(), period.Unix()); to > from {
			on = append(on, stretch{mb.TierID, from, to})
			if !slices.Contains(tierIDs, mb.TierID) {
				tierIDs = append(tierIDs, mb.TierID)
			}
		}
	}
	if len(on) == 0 {
		return m, nil
	}
	var vs []TierTerms
	err = db.Where("tier_id IN ? AND effective_from < ?", tierIDs, end).Order("effective_from, id").Find(&vs).Error
	if err != nil {
		return m, dbErr(err, "tier terms")
	}
	index := map[int64]int{} // version id -> position in m.Terms
	for _, st := range on {
		var versions []TierTerms
		for _, v := range vs {
			if v.TierID == st.tierID {
				versions = append(versions, v)
			}
		}
		for j, v := range versions {
			to := st.to
			if j+1 < len(versions) {
				to = min(to, versions[j+1].EffectiveFrom.Unix())
			}
			from := max(st.from, v.EffectiveFrom.Unix())
			if to <= from {
				continue
			}
			i, ok := index[v.ID]
			if !ok {
				i = len(m.Terms)
				index[v.ID] = i
				m.Terms = append(m.Terms, TermsInForce{Terms: v})
			}
			t := &m.Terms[i]
			span := Span{From: time.Unix(from, 0).UTC(), To: time.Unix(to, 0).UTC()}
			if n := len(t.Spans); n > 0 && t.Spans[n-1].To.Equal(span.From) {
				t.Spans[n-1].To = span.To // a move to the tier it was on: one stretch
			} else {
				t.Spans = append(t.Spans, span)
			}
			t.Seconds += to - from
		}
	}
	return m, nil
}
