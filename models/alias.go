package models

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// LocalModel is the built-in model's name (upstream/local's ModelID,
// which this package may not import): always served, so an alias may
// route to it, and never a name an alias may take.
const LocalModel = "sluice-local"

// Bounds of an alias. Each request to an alias tries at most one target
// and then its fallbacks, and its reservation is priced over all of them,
// so both lists stay short.
const (
	MaxAliasTargets   = 8
	MaxAliasFallbacks = 8
	MaxAliasWeight    = 1000
)

// ModelAlias is a public model name an admin defined: each request to it
// goes to one of Targets, drawn by weight, and, when every key of that
// model is unavailable, to Fallbacks in order.
type ModelAlias struct {
	ID        int64
	Name      string
	Targets   []AliasTarget `gorm:"serializer:json"`
	Fallbacks []string      `gorm:"serializer:json"`
	CreatedAt time.Time
	UpdatedAt time.Time
	CreatedBy *int64
	UpdatedBy *int64
	// UpdatedByEmail is the admin who last changed it, for the admin page;
	// "" for the system or a user since deleted.
	UpdatedByEmail string `gorm:"-"`
}

// AliasTarget is one model an alias routes to and its share of the
// alias's traffic: Weight out of the sum of the targets' weights.
type AliasTarget struct {
	Model  string `json:"model"`
	Weight int    `json:"weight"`
}

// Models are the alias's targets, then its fallbacks not among them, each
// once: every model a request to the alias may be answered by.
func (a ModelAlias) Models() []string {
	out := make([]string, 0, len(a.Targets)+len(a.Fallbacks))
	for _, t := range a.Targets {
		out = append(out, t.Model)
	}
	for _, f := range a.Fallbacks {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Describe is the alias's routing in words, for the audit log: "70
// gpt-4o-mini, 30 claude-3-5-haiku; then gpt-4o".
func (a ModelAlias) Describe() string {
	parts := make([]string, len(a.Targets))
	for i, t := range a.Targets {
		parts[i] = strconv.Itoa(t.Weight) + " " + t.Model
	}
	s := strings.Join(parts, ", ")
	if len(a.Fallbacks) > 0 {
		s += "; then " + strings.Join(a.Fallbacks, ", ")
	}
	return s
}

// ModelAliasInput is what an admin submits for an alias.
type ModelAliasInput struct {
	Name      string
	Targets   []AliasTarget
	Fallbacks []string
}

// aliasName is what an alias may be called: a model name as clients send
// it, without the slash routers put after a provider's name, so it is one
// segment of the admin API's and pages' paths.
var aliasName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}$`)

// validModelName accepts a model's name as providers spell them: visible
// ASCII without the characters that would need escaping in a JSON body
// (quotes, backslashes) or that separate the admin form's lists (commas,
// '='), up to max bytes.
func validModelName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '"' || c == '\\' || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// Validate says what is wrong with the alias on its own, in words for the
// admin; the store then checks it against the provider keys and the
// other aliases.
func (in ModelAliasInput) Validate() error {
	switch {
	case !aliasName.MatchString(in.Name):
		return apperr.Field(apperr.Unprocessable, "invalid_alias", "name",
			"name must be 1 to 100 letters, digits or . _ - : @ +, starting with a letter or digit (e.g. fast)")
	case in.Name == LocalModel:
		return apperr.Field(apperr.Conflict, "alias_conflict", "name", LocalModel+" is the built-in model; an alias needs a name of its own")
	case len(in.Targets) == 0:
		return apperr.Field(apperr.Unprocessable, "invalid_alias", "targets", "targets must name at least one model")
	case len(in.Targets) > MaxAliasTargets:
		return apperr.Field(apperr.Unprocessable, "invalid_alias", "targets", fmt.Sprintf("an alias has at most %d targets", MaxAliasTargets))
	case len(in.Fallbacks) > MaxAliasFallbacks:
		return apperr.Field(apperr.Unprocessable, "invalid_alias", "fallbacks", fmt.Sprintf("an alias has at most %d fallbacks", MaxAliasFallbacks))
	}
	for i, t := range in.Targets {
		field := fmt.Sprintf("targets[%d]", i)
		switch {
		case !validModelName(t.Model, maxModelName):
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field,
				field+" must name a model: 1 to 200 characters without spaces, quotes, backslashes, commas or '='")
		case t.Weight < 1 || t.Weight > MaxAliasWeight:
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field,
				fmt.Sprintf("the weight of %s (%s) must be a whole number from 1 to %d", field, t.Model, MaxAliasWeight))
		case t.Model == in.Name:
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field, "an alias cannot route to itself")
		}
		for _, u := range in.Targets[:i] {
			if u.Model == t.Model {
				return apperr.Field(apperr.Unprocessable, "invalid_alias", field, "targets name "+t.Model+" twice; give it one weight")
			}
		}
	}
	for i, f := range in.Fallbacks {
		field := fmt.Sprintf("fallbacks[%d]", i)
		switch {
		case !validModelName(f, maxModelName):
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field,
				field+" must name a model: 1 to 200 characters without spaces, quotes, backslashes, commas or '='")
		case f == in.Name:
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field, "an alias cannot route to itself")
		case slices.Contains(in.Fallbacks[:i], f):
			return apperr.Field(apperr.Unprocessable, "invalid_alias", field, "fallbacks name "+f+" twice")
		}
	}
	return nil
}

// errAliasOfAlias explains the refusal of an alias that routes to another.
func errAliasOfAlias(field, name string) error {
	return apperr.Field(apperr.Unprocessable, "alias_of_alias", field,
		field+" '"+name+"' is an alias; an alias routes to models only, so a request is resolved in one lookup, "+
			"can never loop, and is priced over models this alias names")
}

// servedModels is what the provider keys serve: the models they name, and
// whether some key names none (it serves any model). Disabled keys count:
// an admin replaces them, and the models they served stay taken meanwhile.
func servedModels(tx *gorm.DB) (map[string]bool, bool, error) {
	var ks []UpstreamKey
	if err := tx.Select("models").Find(&ks).Error; err != nil {
		return nil, false, dbErr(err, "upstream keys")
	}
	named, anyModel := map[string]bool{}, false
	for _, k := range ks {
		ms := k.ModelList()
		if len(ms) == 0 {
			anyModel = true
		}
		for _, m := range ms {
			named[m] = true
		}
	}
	return named, anyModel, nil
}

// lockRouting serialises, on Postgres, the writes that decide which names
// are aliases and which are models (aliases, provider keys), so two of
// them at once cannot make an alias of an alias or an alias named like a
// key's model. SQLite's one writer runs them one at a time already.
func lockRouting(tx *gorm.DB) error {
	if tx.Dialector.Name() != "postgres" {
		return nil
	}
	return dbErr(tx.Exec("SELECT pg_advisory_xact_lock(7234617)").Error, "routing lock")
}

// checkAlias checks in against the provider keys and the other aliases,
// inside tx: its name is no model a key names, nor a model another alias
// routes to; its models are served (by a key, or sluice-local) and are no
// aliases.
func checkAlias(tx *gorm.DB, in ModelAliasInput) error {
	named, anyModel, err := servedModels(tx)
	if err != nil {
		return err
	}
	if named[in.Name] {
		return apperr.Field(apperr.Conflict, "alias_conflict", "name",
			"'"+in.Name+"' is a model a provider key serves; an alias needs a name of its own")
	}
	var others []ModelAlias
	if err := tx.Where("name <> ?", in.Name).Find(&others).Error; err != nil {
		return dbErr(err, "model aliases")
	}
	aliases := map[string]bool{}
	for _, o := range others {
		aliases[o.Name] = true
		if slices.Contains(o.Models(), in.Name) {
			return apperr.Field(apperr.Conflict, "alias_conflict", "name",
				"'"+in.Name+"' is a model the alias '"+o.Name+"' routes to; an alias needs a name no alias routes to")
		}
	}
	check := func(field, m string) error {
		switch {
		case aliases[m]:
			return errAliasOfAlias(field, m)
		case m != LocalModel && !named[m] && !anyModel:
			return apperr.Field(apperr.Unprocessable, "unknown_model", field,
				field+" '"+m+"' is not a model any provider key serves; add a key that serves it first, or route to "+LocalModel)
		}
		return nil
	}
	for i, t := range in.Targets {
		if err := check(fmt.Sprintf("targets[%d]", i), t.Model); err != nil {
			return err
		}
	}
	for i, f := range in.Fallbacks {
		if err := check(fmt.Sprintf("fallbacks[%d]", i), f); err != nil {
			return err
		}
	}
	return nil
}

// CreateModelAlias stores a new alias, checked and audited.
func (s *Store) CreateModelAlias(ctx context.Context, admin User, in ModelAliasInput) (ModelAlias, error) {
	in.Name = strings.TrimSpace(in.Name)
	if err := in.Validate(); err != nil {
		return ModelAlias{}, err
	}
	now := s.now().UTC()
	a := ModelAlias{Name: in.Name, Targets: in.Targets, Fallbacks: nonNil(in.Fallbacks), CreatedAt: now, UpdatedAt: now,
		CreatedBy: actorID(admin), UpdatedBy: actorID(admin)}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockRouting(tx); err != nil {
			return err
		}
		if err := checkAlias(tx, in); err != nil {
			return err
		}
		if err := tx.Create(&a).Error; err != nil {
			return dbErr(err, "alias "+a.Name)
		}
		return audit(tx, admin.LastOrgID, admin.ID, "alias.create", a.Name, a.Describe())
	})
	a.UpdatedByEmail = admin.Email
	return a, dbErr(err, "alias")
}

// UpdateModelAlias replaces an alias's targets and fallbacks, checked and
// audited with what they were.
func (s *Store) UpdateModelAlias(ctx context.Context, admin User, name string, in ModelAliasInput) (ModelAlias, error) {
	in.Name = name
	if err := in.Validate(); err != nil {
		return ModelAlias{}, err
	}
	var a ModelAlias
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockRouting(tx); err != nil {
			return err
		}
		if err := lockedForUpdate(tx).Where("name = ?", name).Take(&a).Error; err != nil {
			return dbErr(err, "alias "+name)
		}
		if err := checkAlias(tx, in); err != nil {
			return err
		}
		before := a.Describe()
		a.Targets, a.Fallbacks, a.UpdatedAt, a.UpdatedBy = in.Targets, nonNil(in.Fallbacks), s.now().UTC(), actorID(admin)
		// UpdateColumns, so gorm keeps the store's clock's updated_at.
		if err := tx.Model(&a).Select("targets", "fallbacks", "updated_at", "updated_by").UpdateColumns(&a).Error; err != nil {
			return dbErr(err, "alias "+name)
		}
		return audit(tx, admin.LastOrgID, admin.ID, "alias.update", name, before+" -> "+a.Describe())
	})
	a.UpdatedByEmail = admin.Email
	return a, err
}

// DeleteModelAlias removes an alias, audited with what it routed to.
// Requests to its name are refused from then on, as for any unknown model.
func (s *Store) DeleteModelAlias(ctx context.Context, admin User, name string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockRouting(tx); err != nil {
			return err
		}
		var a ModelAlias
		if err := tx.Where("name = ?", name).Take(&a).Error; err != nil {
			return dbErr(err, "alias "+name)
		}
		if err := tx.Delete(&a).Error; err != nil {
			return dbErr(err, "alias "+name)
		}
		return audit(tx, admin.LastOrgID, admin.ID, "alias.delete", name, a.Describe())
	})
}

// ModelAliases lists every alias by name, with the email of the admin who
// last changed each.
func (s *Store) ModelAliases(ctx context.Context) ([]ModelAlias, error) {
	var as []ModelAlias
	if err := s.db.WithContext(ctx).Order("name").Find(&as).Error; err != nil {
		return nil, dbErr(err, "model aliases")
	}
	var ids []int64
	for _, a := range as {
		if a.UpdatedBy != nil && !slices.Contains(ids, *a.UpdatedBy) {
			ids = append(ids, *a.UpdatedBy)
		}
	}
	if len(ids) == 0 {
		return as, nil
	}
	var us []User
	if err := s.db.WithContext(ctx).Select("id", "email").Where("id IN ?", ids).Find(&us).Error; err != nil {
		return nil, dbErr(err, "users")
	}
	emails := make(map[int64]string, len(us))
	for _, u := range us {
		emails[u.ID] = u.Email
	}
	for i, a := range as {
		if a.UpdatedBy != nil {
			as[i].UpdatedByEmail = emails[*a.UpdatedBy]
		}
	}
	return as, nil
}

// aliasNamed returns one of names that is an alias's name, "" when none
// is, inside tx: a provider key may not serve a model under an alias's name.
func aliasNamed(tx *gorm.DB, names []string) (string, error) {
	if len(names) == 0 {
		return "", nil
	}
	var as []ModelAlias
	if err := tx.Select("name").Where("name IN ?", names).Limit(1).Find(&as).Error; err != nil {
		return "", dbErr(err, "model aliases")
	}
	if len(as) == 0 {
		return "", nil
	}
	return as[0].Name, nil
}

func actorID(u User) *int64 {
	if u.ID == 0 {
		return nil
	}
	id := u.ID
	return &id
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
