package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// Tier is a plan: the shape of every token bucket of its organizations.
type Tier struct {
	ID                int64
	Name              string
	Capacity          int64
	RefillPerSec      float64
	TokensPerMinute   int64
	MonthlyTokenQuota int64
	FreezeThreshold   int
	FreezeMinutes     int
	Autotune          bool
	RefillFloor       float64
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// TierLimits are the admin-editable bucket settings of a tier.
type TierLimits struct {
	Capacity     int64
	RefillPerSec float64
}

// Validate says what is wrong with the limits, in words for the admin.
func (l TierLimits) Validate() error {
	switch {
	case l.Capacity < 1 || l.Capacity > 1_000_000:
		return apperr.New(apperr.Unprocessable, "capacity must be between 1 and 1000000")
	case !(l.RefillPerSec > 0) || l.RefillPerSec > 1_000_000:
		return apperr.New(apperr.Unprocessable, "refill_per_sec must be greater than 0 and at most 1000000")
	}
	return nil
}

// Tiers lists every tier by name.
func (s *Store) Tiers(ctx context.Context) ([]Tier, error) {
	var ts []Tier
	err := s.db.WithContext(ctx).Order("capacity, name").Find(&ts).Error
	return ts, dbErr(err, "tiers")
}

// TierByName returns one tier.
func (s *Store) TierByName(ctx context.Context, name string) (Tier, error) {
	var t Tier
	err := s.db.WithContext(ctx).Where("name = ?", name).Take(&t).Error
	return t, dbErr(err, "tier "+name)
}

// UpdateTierLimits changes a tier's bucket and records who did it.
func (s *Store) UpdateTierLimits(ctx context.Context, actor User, name string, l TierLimits) (Tier, error) {
	if err := l.Validate(); err != nil {
		return Tier{}, err
	}
	var t Tier
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("name = ?", name).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		before := t
		t.Capacity, t.RefillPerSec, t.UpdatedAt = l.Capacity, l.RefillPerSec, time.Now().UTC()
		if err := tx.Model(&t).Select("capacity", "refill_per_sec", "updated_at").Updates(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		return audit(tx, actor.OrgID, actor.ID, "tier.update", name,
			fmt.Sprintf("capacity %d -> %d, refill %g -> %g/s", before.Capacity, t.Capacity, before.RefillPerSec, t.RefillPerSec))
	})
	return t, err
}
