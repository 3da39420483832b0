package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestAdminAliasesPage: an admin adds an alias from the form and sees it
// listed with its targets' shares and fallbacks; "Change" fills the form
// with it and saving replaces its routing; a refused form comes back with
// what was typed and why; delete removes it; members and cross-site posts
// are turned away.
func TestAdminAliasesPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	if _, err := s.providers.Create(context.Background(), s.admin.User, models.UpstreamKeyInput{Name: "openai", BaseURL: "https://api.example.com/v1",
		APIKey: "sk-live-secret-aaaa1111", Weight: 1, Models: []string{"gpt-4o-mini", "gpt-4o"}}); err != nil {
		t.Fatal(err)
	}
	admin := s.signedIn(s.admin)
	admin.get("/admin/aliases").expectPage(http.StatusOK, "admin-aliases", "aliases-empty", "alias-form", "admin-nav-aliases")

	admin.post("/admin/aliases", url.Values{"name": {"fast"}, "targets": {"gpt-4o-mini=70, gpt-4o=30"}, "fallbacks": {"sluice-local"}}).
		expectRedirect("/admin/aliases?done=added")
	w := admin.get("/admin/aliases?done=added")
	w.expectPage(http.StatusOK, "alias-row", "flash")
	if got := w.text("alias-targets"); got != "gpt-4o-mini 70%, gpt-4o 30%" {
		t.Errorf("targets = %q", got)
	}
	if got := w.text("alias-fallbacks"); got != "sluice-local" {
		t.Errorf("fallbacks = %q", got)
	}
	if a, ok := s.aliases.Alias("fast"); !ok || len(a.Targets) != 2 || a.Targets[0].Weight != 70 {
		t.Fatalf("the alias is not in force on this node: %+v", a)
	}

	w = admin.get("/admin/aliases?edit=fast")
	w.expectPage(http.StatusOK, "alias-form", "cancel-alias-edit")
	if got := w.value("#alias-targets"); got != "gpt-4o-mini=70, gpt-4o=30" {
		t.Errorf("the edit form's targets = %q", got)
	}
	if action, _ := w.testid("alias-form").Attr("action"); action != "/admin/aliases/fast" {
		t.Errorf("the edit form posts to %q", action)
	}
	admin.post("/admin/aliases/fast", url.Values{"targets": {"gpt-4o"}, "fallbacks": {""}}).expectRedirect("/admin/aliases?done=saved")
	if got := admin.get("/admin/aliases").text("alias-targets"); got != "gpt-4o 100%" {
		t.Errorf("targets after the change = %q", got)
	}

	before := s.snapshot()
	w = admin.post("/admin/aliases", url.Values{"name": {"quick"}, "targets": {"gpt-4o=lots"}})
	w.expectFormError(http.StatusUnprocessableEntity, "alias-form",
		"Write each target as model=weight with a whole-number weight, e.g. gpt-4o-mini=70, claude-3-5-haiku=30.")
	if got := w.value("#alias-name"); got != "quick" {
		t.Errorf("the refused form lost the name: %q", got)
	}
	admin.post("/admin/aliases", url.Values{"name": {"gpt-4o"}, "targets": {"gpt-4o-mini"}}).expectFormError(http.StatusConflict, "alias-form",
		"'gpt-4o' is a model a provider key serves; an alias needs a name of its own")
	admin.post("/admin/aliases/fast", url.Values{"targets": {"fast"}}).expectFormError(http.StatusUnprocessableEntity, "alias-form",
		"an alias cannot route to itself")
	if s.snapshot() != before {
		t.Error("a refused form changed something")
	}

	member := s.signedIn(s.signup("m@example.com", "M"))
	member.get("/admin/aliases").expectError(http.StatusForbidden, "This page is for Sluice admins.")
	w = admin.do(http.MethodPost, "/admin/aliases/fast/delete", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	w.expectError(http.StatusForbidden, refusedOrigin)
	admin.post("/admin/aliases/fast/delete", url.Values{}).expectRedirect("/admin/aliases?done=deleted")
	if _, ok := s.aliases.Alias("fast"); ok {
		t.Fatal("a deleted alias is still in force")
	}
	admin.get("/admin/aliases").expectPage(http.StatusOK, "aliases-empty")
}
