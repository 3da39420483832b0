package models

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// TuningEvent records one change the auto-tuner made to a tier's refill.
type TuningEvent struct {
	ID         int64
	Tier       string
	FromRefill float64
	ToRefill   float64
	Load       float64
	CreatedAt  time.Time
}

// ApplyTuning sets the tiers' effective refill and records each change, in
// one transaction.
func (s *Store) ApplyTuning(ctx context.Context, evs []TuningEvent) error {
	if len(evs) == 0 {
		return nil
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i := range evs {
			e := &evs[i]
			if err := tx.Model(&Tier{}).Where("name = ?", e.Tier).Update("effective_refill_per_sec", e.ToRefill).Error; err != nil {
				return dbErr(err, "tier "+e.Tier)
			}
			if err := tx.Create(e).Error; err != nil {
				return dbErr(err, "tuning event")
			}
		}
		return nil
	})
}

// TuningEvents lists the latest changes, newest first.
func (s *Store) TuningEvents(ctx context.Context, limit int) ([]TuningEvent, error) {
	var es []TuningEvent
	err := s.db.WithContext(ctx).Order("id DESC").Limit(limit).Find(&es).Error
	return es, dbErr(err, "tuning events")
}
