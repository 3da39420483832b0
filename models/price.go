package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// ModelPrice is one version of a model's price. Versions are never changed:
// a new price is a new row from its effective time on, so usage already
// billed keeps the price it was billed at.
type ModelPrice struct {
	ID                 int64
	Model              string
	InputPerMTok       money.Price `gorm:"column:input_per_mtok"`
	OutputPerMTok      money.Price `gorm:"column:output_per_mtok"`
	CachedInputPerMTok money.Price `gorm:"column:cached_input_per_mtok"`
	// CacheCreationPerMTok prices prompt tokens written to the provider's
	// prompt cache, ReasoningPerMTok a model's thinking tokens; nil means
	// the input and the output price.
	CacheCreationPerMTok *money.Price `gorm:"column:cache_creation_per_mtok"`
	ReasoningPerMTok     *money.Price `gorm:"column:reasoning_per_mtok"`
	EffectiveFrom        time.Time
	CreatedBy            *int64
}

// maxModelName bounds a model's name as providers spell them.
const maxModelName = 200

// SetModelPrice puts a new price for model in force from at on, audited.
func (s *Store) SetModelPrice(ctx context.Context, actor User, p ModelPrice, at time.Time) (ModelPrice, error) {
	if p.Model == "" || len(p.Model) > maxModelName {
		return ModelPrice{}, apperr.New(apperr.Unprocessable, "model must be 1 to %d characters", maxModelName)
	}
	prices := []money.Price{p.InputPerMTok, p.OutputPerMTok, p.CachedInputPerMTok}
	for _, v := range []*money.Price{p.CacheCreationPerMTok, p.ReasoningPerMTok} {
		if v != nil {
			prices = append(prices, *v)
		}
	}
	for _, v := range prices {
		if v < 0 || v > money.MaxPrice {
			return ModelPrice{}, apperr.New(apperr.Unprocessable, "prices must be from 0 to %s per million tokens", money.MaxPrice)
		}
	}
	p.ID, p.EffectiveFrom = 0, at.UTC()
	if actor.ID != 0 {
		p.CreatedBy = &actor.ID
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&p).Error; err != nil {
			return dbErr(err, "price for "+p.Model)
		}
		return audit(tx, actor.LastOrgID, actor.ID, "price.set", p.Model, fmt.Sprintf("input %s, output %s, cached input %s per million tokens",
			p.InputPerMTok, p.OutputPerMTok, p.CachedInputPerMTok))
	})
	return p, dbErr(err, "price")
}

// ModelPrices lists every price version, by model and time.
func (s *Store) ModelPrices(ctx context.Context) ([]ModelPrice, error) {
	var ps []ModelPrice
	err := s.db.WithContext(ctx).Order("model, effective_from").Find(&ps).Error
	return ps, dbErr(err, "prices")
}
