package models_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// aliasStore is a store with an admin and two provider keys: one serving
// gpt-4o-mini and gpt-4o, one claude-3-5-haiku.
func aliasStore(t *testing.T, db *models.DB, clk *clocktest.Clock) (*models.Store, models.User) {
	t.Helper()
	s := models.NewStore(db, models.WithClock(clk.Now))
	_, admin, err := s.CreateOrganizationWithOwner(ctx, "Ops", "free", "ops@example.com", "h", models.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	for name, ms := range map[string][]string{"openai": {"gpt-4o-mini", "gpt-4o"}, "anthropic": {"claude-3-5-haiku"}} {
		_, err := s.CreateUpstreamKey(ctx, admin.User, models.UpstreamKeyInput{Name: name, BaseURL: "https://api.example.com/v1",
			APIKey: "sk-test-" + name, Weight: 1, Models: ms}, func(p string) string { return "sealed:" + p })
		if err != nil {
			t.Fatal(err)
		}
	}
	return s, admin.User
}

// TestModelAliasValidation: each way an alias can be wrong is refused with
// its status and a message that says what to change, and nothing is stored.
func TestModelAliasValidation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s, admin := aliasStore(t, db, clocktest.New(time.Now()))
		if _, err := s.CreateModelAlias(ctx, admin, models.ModelAliasInput{Name: "smart",
			Targets: []models.AliasTarget{{Model: "gpt-4o", Weight: 1}}}); err != nil {
			t.Fatal(err)
		}
		one := []models.AliasTarget{{Model: "gpt-4o-mini", Weight: 1}}
		nine := make([]models.AliasTarget, 9)
		for i := range nine {
			nine[i] = models.AliasTarget{Model: "m" + string(rune('a'+i)), Weight: 1}
		}
		tests := []struct {
			name string
			in   models.ModelAliasInput
			code apperr.Code
			msg  string
		}{
			{"empty name", models.ModelAliasInput{Targets: one}, apperr.Unprocessable,
				"name must be 1 to 100 letters, digits or . _ - : @ +, starting with a letter or digit (e.g. fast)"},
			{"name with a space", models.ModelAliasInput{Name: "my fast", Targets: one}, apperr.Unprocessable, "name must be 1 to 100 letters"},
			{"name with a slash", models.ModelAliasInput{Name: "team/fast", Targets: one}, apperr.Unprocessable, "name must be 1 to 100 letters"},
			{"the local model's name", models.ModelAliasInput{Name: "sluice-local", Targets: one}, apperr.Conflict,
				"sluice-local is the built-in model; an alias needs a name of its own"},
			{"a model a key serves", models.ModelAliasInput{Name: "gpt-4o", Targets: one}, apperr.Conflict,
				"'gpt-4o' is a model a provider key serves; an alias needs a name of its own"},
			{"taken by another alias", models.ModelAliasInput{Name: "smart", Targets: one}, apperr.Conflict, "alias smart already exists"},
			{"no targets", models.ModelAliasInput{Name: "fast"}, apperr.Unprocessable, "targets must name at least one model"},
			{"nine targets", models.ModelAliasInput{Name: "fast", Targets: nine}, apperr.Unprocessable, "an alias has at most 8 targets"},
			{"nine fallbacks", models.ModelAliasInput{Name: "fast", Targets: one,
				Fallbacks: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}}, apperr.Unprocessable, "an alias has at most 8 fallbacks"},
			{"weight 0", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "gpt-4o-mini"}}}, apperr.Unprocessable,
				"the weight of targets[0] (gpt-4o-mini) must be a whole number from 1 to 1000"},
			{"weight 1001", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "gpt-4o-mini", Weight: 1001}}},
				apperr.Unprocessable, "from 1 to 1000"},
			{"a target twice", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "gpt-4o", Weight: 1}, {Model: "gpt-4o", Weight: 2}}},
				apperr.Unprocessable, "targets name gpt-4o twice; give it one weight"},
			{"a fallback twice", models.ModelAliasInput{Name: "fast", Targets: one, Fallbacks: []string{"gpt-4o", "gpt-4o"}},
				apperr.Unprocessable, "fallbacks name gpt-4o twice"},
			{"itself", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "fast", Weight: 1}}},
				apperr.Unprocessable, "an alias cannot route to itself"},
			{"a model nobody serves", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "gpt-5", Weight: 1}}},
				apperr.Unprocessable, "targets[0] 'gpt-5' is not a model any provider key serves; add a key that serves it first, or route to sluice-local"},
			{"a fallback nobody serves", models.ModelAliasInput{Name: "fast", Targets: one, Fallbacks: []string{"o3"}},
				apperr.Unprocessable, "fallbacks[0] 'o3' is not a model any provider key serves"},
			{"an alias of an alias", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: "smart", Weight: 1}}},
				apperr.Unprocessable, "targets[0] 'smart' is an alias; an alias routes to models only, so a request is resolved in one lookup, can never loop"},
			{"a fallback that is an alias", models.ModelAliasInput{Name: "fast", Targets: one, Fallbacks: []string{"smart"}},
				apperr.Unprocessable, "fallbacks[0] 'smart' is an alias"},
			{"a target with a quote", models.ModelAliasInput{Name: "fast", Targets: []models.AliasTarget{{Model: `gpt"4`, Weight: 1}}},
				apperr.Unprocessable, "targets[0] must name a model: 1 to 200 characters without spaces, quotes"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.CreateModelAlias(ctx, admin, tt.in)
				e := apperr.As(err)
				if err == nil || e.Code != tt.code || !strings.Contains(e.Message, tt.msg) {
					t.Fatalf("got %v, want %s containing %q", err, tt.code, tt.msg)
				}
			})
		}
		as, err := s.ModelAliases(ctx)
		if err != nil || len(as) != 1 || as[0].Name != "smart" {
			t.Fatalf("refused aliases were stored: %+v %v", as, err)
		}
	})
}

// TestModelAliasLifecycle: create, update and delete are stored and
// audited with what changed and who did it; a name an alias routes to
// cannot become an alias; a key may not serve a model under an alias's
// name; sluice-local and, with a key that serves any model, any model
// are valid targets.
func TestModelAliasLifecycle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		clk := clocktest.New(time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC))
		s, admin := aliasStore(t, db, clk)
		a, err := s.CreateModelAlias(ctx, admin, models.ModelAliasInput{Name: "fast",
			Targets:   []models.AliasTarget{{Model: "gpt-4o-mini", Weight: 70}, {Model: "claude-3-5-haiku", Weight: 30}},
			Fallbacks: []string{"gpt-4o", "sluice-local"}})
		if err != nil {
			t.Fatal(err)
		}
		if !a.CreatedAt.Equal(clk.Now()) || a.CreatedBy == nil || *a.CreatedBy != admin.ID {
			t.Fatalf("created %+v", a)
		}
		clk.Advance(time.Hour)
		if _, err := s.UpdateModelAlias(ctx, admin, "fast", models.ModelAliasInput{
			Targets: []models.AliasTarget{{Model: "gpt-4o-mini", Weight: 1}}}); err != nil {
			t.Fatal(err)
		}
		as, err := s.ModelAliases(ctx)
		if err != nil || len(as) != 1 {
			t.Fatalf("list: %+v %v", as, err)
		}
		got := as[0]
		if len(got.Targets) != 1 || got.Targets[0] != (models.AliasTarget{Model: "gpt-4o-mini", Weight: 1}) || len(got.Fallbacks) != 0 ||
			!got.UpdatedAt.Equal(clk.Now()) || !got.CreatedAt.Equal(clk.Now().Add(-time.Hour)) || got.UpdatedByEmail != "ops@example.com" {
			t.Fatalf("after update: %+v", got)
		}
		if _, err := s.UpdateModelAlias(ctx, admin, "slow", models.ModelAliasInput{Targets: got.Targets}); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("update of a missing alias: %v", err)
		}

		// gpt-4o-mini is a target of fast: as an alias it would make fast an
		// alias of an alias.
		_, err = s.CreateModelAlias(ctx, admin, models.ModelAliasInput{Name: "gpt-4o-mini", Targets: []models.AliasTarget{{Model: "gpt-4o", Weight: 1}}})
		if e := apperr.As(err); e.Code != apperr.Conflict || !strings.Contains(e.Message, "is a model a provider key serves") {
			t.Fatalf("alias named like a served model: %v", err)
		}
		// With a key that serves any model, a model no key names is a valid
		// target, but a name an alias routes to still is not an alias name.
		if _, err := s.CreateUpstreamKey(ctx, admin, models.UpstreamKeyInput{Name: "router", BaseURL: "https://router.example.com/v1",
			APIKey: "sk-router-1", Weight: 1}, func(p string) string { return p }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateModelAlias(ctx, admin, models.ModelAliasInput{Name: "cheap", Targets: []models.AliasTarget{{Model: "mistral-small", Weight: 1}}}); err != nil {
			t.Fatalf("a target served by a key for any model: %v", err)
		}
		_, err = s.CreateModelAlias(ctx, admin, models.ModelAliasInput{Name: "mistral-small", Targets: []models.AliasTarget{{Model: "gpt-4o", Weight: 1}}})
		if e := apperr.As(err); e.Code != apperr.Conflict || e.Message != "'mistral-small' is a model the alias 'cheap' routes to; an alias needs a name no alias routes to" {
			t.Fatalf("alias named like another alias's target: %v", err)
		}
		// A key may not serve a model under an alias's name.
		_, err = s.CreateUpstreamKey(ctx, admin, models.UpstreamKeyInput{Name: "shadow", BaseURL: "https://api.example.com/v1",
			APIKey: "sk-shadow-1", Weight: 1, Models: []string{"o3", "fast"}}, func(p string) string { return p })
		if e := apperr.As(err); e.Code != apperr.Conflict || !strings.Contains(e.Message, "'fast' is the name of a model alias") {
			t.Fatalf("key serving an alias's name: %v", err)
		}

		if err := s.DeleteModelAlias(ctx, admin, "fast"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteModelAlias(ctx, admin, "fast"); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("second delete: %v", err)
		}
		log, _, err := s.AuditEntries(ctx, models.AuditQuery{ActionPrefix: "alias."})
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, e := range log {
			lines = append(lines, e.Action+" "+e.Target+" "+e.Detail+" by "+e.ActorEmail)
		}
		want := []string{ // newest first
			"alias.delete fast 1 gpt-4o-mini by ops@example.com",
			"alias.create cheap 1 mistral-small by ops@example.com",
			"alias.update fast 70 gpt-4o-mini, 30 claude-3-5-haiku; then gpt-4o, sluice-local -> 1 gpt-4o-mini by ops@example.com",
			"alias.create fast 70 gpt-4o-mini, 30 claude-3-5-haiku; then gpt-4o, sluice-local by ops@example.com",
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Fatalf("audit:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	})
}
