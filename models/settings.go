package models

import (
	"context"

	"gorm.io/gorm/clause"
)

type setting struct {
	Key   string `gorm:"primaryKey"`
	Value string
}

func (setting) TableName() string { return "settings" }

// SettingOrInit returns the stored value of key, storing value first if the
// key is absent. Concurrent callers all get the one value that won, which is
// how several nodes agree on a generated secret.
func (s *Store) SettingOrInit(ctx context.Context, key, value string) (string, error) {
	db := s.db.WithContext(ctx)
	err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&setting{Key: key, Value: value}).Error
	if err != nil {
		return "", dbErr(err, "setting")
	}
	var got setting
	err = db.Where("key = ?", key).Take(&got).Error
	return got.Value, dbErr(err, "setting")
}
