package models

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// UpstreamKey is an operator's provider key. The key itself is stored only
// sealed (KeyCiphertext); KeyLast4 is all that is ever shown again.
type UpstreamKey struct {
	ID             int64
	Name           string
	Provider       string // the kind of provider: openai, anthropic, gemini, azure
	BaseURL        string
	KeyCiphertext  string
	KeyLast4       string
	Weight         int
	RPM            int64  `gorm:"column:rpm"`
	TPM            int64  `gorm:"column:tpm"`
	Models         string // comma-separated; empty = any model
	DisabledReason string
	DisabledAt     *time.Time
	CreatedAt      time.Time
}

// ModelList splits Models.
func (k UpstreamKey) ModelList() []string {
	var out []string
	for _, m := range strings.Split(k.Models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// UpstreamKeyInput is what an admin submits for a new key.
// Whether BaseURL suits Provider is the upstream package's to say.
type UpstreamKeyInput struct {
	Name     string
	Provider string // "" is openai
	BaseURL  string
	APIKey   string
	Weight   int
	RPM      int64
	TPM      int64
	Models   []string
}

// Validate says what is wrong with the input, in words for the admin.
func (in UpstreamKeyInput) Validate() error {
	u, err := url.Parse(in.BaseURL)
	switch {
	case strings.TrimSpace(in.Name) == "" || len(in.Name) > 100:
		return apperr.New(apperr.Unprocessable, "name must be 1 to 100 characters")
	// Only an Azure deployment's URL has a query (its api-version): any
	// other could carry a credential into logs.
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" && in.Provider != "azure":
		return apperr.New(apperr.Unprocessable, "base_url must be an http(s) URL such as https://api.openai.com/v1")
	case len(in.APIKey) < 8 || len(in.APIKey) > 512 || strings.ContainsAny(in.APIKey, " \t\r\n"):
		return apperr.New(apperr.Unprocessable, "api_key must be 8 to 512 characters without spaces")
	case in.Weight < 1 || in.Weight > 1000:
		return apperr.New(apperr.Unprocessable, "weight must be from 1 to 1000")
	case in.RPM < 0:
		return rateError("rpm")
	case in.TPM < 0:
		return rateError("tpm")
	}
	for _, m := range in.Models {
		if m == "" || strings.ContainsAny(m, ", ") {
			return apperr.New(apperr.Unprocessable, "models must be names without commas or spaces")
		}
	}
	return nil
}

// Any RPM or TPM from 0 to the largest int64 is accepted: the pool paces
// every such rate (rates beyond what its buckets represent exactly are
// counted in coarser units; see upstream/README.md), so only values that
// are not a whole number of 0 or more are refused.

// rateNumber is a rate as an admin may write it: digits, optionally with a
// fraction and a short exponent ("1000000000000", "1e12", "1.5e6"). The
// exponent is bounded so that parsing never builds a huge number.
var rateNumber = regexp.MustCompile(`^[0-9]{1,20}(\.[0-9]{1,20})?([eE]\+?[0-9]{1,2})?$`)

// ParseKeyRate reads an RPM or TPM as written in a form or a JSON body
// ("" is 0, unknown). It accepts a whole number of 0 or more, in plain or
// exponent form, up to the largest int64, and otherwise returns an
// Unprocessable error naming field.
func ParseKeyRate(field, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if !rateNumber.MatchString(s) {
		return 0, rateError(field)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, rateError(field)
	}
	return r.Num().Int64(), nil
}

// rateError is the refusal of an RPM or TPM, naming the field: a 400, since
// a rate that cannot work is a bad request, not a bad entity (the key's
// other fields are refused with 422).
func rateError(field string) error {
	return apperr.Field(apperr.Invalid, "invalid_"+field, field,
		field+" must be a whole number of 0 (unknown) or more, at most 9223372036854775807 (e.g. 1000000000000 or 1e12)")
}

// CreateUpstreamKey stores a key sealed by seal and audits it.
func (s *Store) CreateUpstreamKey(ctx context.Context, admin User, in UpstreamKeyInput, seal func(string) string) (UpstreamKey, error) {
	if err := in.Validate(); err != nil {
		return UpstreamKey{}, err
	}
	k := UpstreamKey{
		Name: strings.TrimSpace(in.Name), Provider: cmp.Or(in.Provider, "openai"), BaseURL: strings.TrimRight(in.BaseURL, "/"),
		KeyCiphertext: seal(in.APIKey), KeyLast4: in.APIKey[len(in.APIKey)-4:],
		Weight: in.Weight, RPM: in.RPM, TPM: in.TPM, Models: strings.Join(in.Models, ","), CreatedAt: time.Now().UTC(),
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// A model served under an alias's name would be shadowed by the
		// alias (aliases are looked up first), so it is refused here.
		if err := lockRouting(tx); err != nil {
			return err
		}
		taken, err := aliasNamed(tx, in.Models)
		if err != nil {
			return err
		}
		if taken != "" {
			return apperr.Field(apperr.Conflict, "alias_conflict", "models",
				"'"+taken+"' is the name of a model alias; a key cannot serve a model of that name (delete the alias first)")
		}
		if err := tx.Create(&k).Error; err != nil {
			return dbErr(err, "upstream key "+k.Name)
		}
		return audit(tx, admin.LastOrgID, admin.ID, "upstream.create", fmt.Sprint(k.ID), k.Name+" "+k.BaseURL+" …"+k.KeyLast4)
	})
	return k, dbErr(err, "provider key")
}

// UpstreamKeys lists every provider key.
func (s *Store) UpstreamKeys(ctx context.Context) ([]UpstreamKey, error) {
	var ks []UpstreamKey
	err := s.db.WithContext(ctx).Order("id").Find(&ks).Error
	return ks, dbErr(err, "upstream keys")
}

// DeleteUpstreamKey removes a provider key.
func (s *Store) DeleteUpstreamKey(ctx context.Context, admin User, id int64) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var k UpstreamKey
		if err := tx.Where("id = ?", id).Take(&k).Error; err != nil {
			return dbErr(err, "upstream key")
		}
		if err := tx.Delete(&k).Error; err != nil {
			return dbErr(err, "upstream key")
		}
		return audit(tx, admin.LastOrgID, admin.ID, "upstream.delete", fmt.Sprint(id), k.Name)
	})
}

// DisableUpstreamKey marks a key the provider refused, so it stays out of
// rotation (on every node, after restarts) until an admin replaces it.
func (s *Store) DisableUpstreamKey(ctx context.Context, id int64, reason string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := time.Now().UTC()
		res := tx.Model(&UpstreamKey{}).Where("id = ? AND disabled_at IS NULL", id).
			Updates(map[string]any{"disabled_at": now, "disabled_reason": reason})
		if res.Error != nil || res.RowsAffected == 0 {
			return dbErr(res.Error, "upstream key")
		}
		return audit(tx, 0, 0, "upstream.disable", fmt.Sprint(id), reason)
	})
}
