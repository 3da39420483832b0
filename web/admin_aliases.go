package web

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// aliasFlashes are the aliases page's messages after a change.
var aliasFlashes = map[string]string{
	"added":   "Alias added. The next request naming it, on every node, is routed by it.",
	"saved":   "Alias saved. The next request naming it, on every node, is routed the new way.",
	"deleted": "Alias deleted. Requests naming it are refused from now on.",
}

// AdminAliases lists the model aliases; ?edit= fills the form with that
// alias to change it.
func (p *Pages) AdminAliases(c *gin.Context) {
	form := templates.AliasForm{}
	if name := c.Query("edit"); name != "" {
		as, err := p.aliases.List(c.Request.Context())
		if err != nil {
			p.fail(c, err)
			return
		}
		i := slices.IndexFunc(as, func(a models.ModelAlias) bool { return a.Name == name })
		if i < 0 {
			p.fail(c, apperr.New(apperr.NotFound, "No alias %s.", name))
			return
		}
		form = aliasFormOf(as[i])
	}
	p.showAliases(c, http.StatusOK, "", aliasFlashes[c.Query("done")], form)
}

// aliasFormOf is an alias as its form shows it.
func aliasFormOf(a models.ModelAlias) templates.AliasForm {
	ts := make([]string, len(a.Targets))
	for i, t := range a.Targets {
		ts[i] = t.Model + "=" + strconv.Itoa(t.Weight)
	}
	return templates.AliasForm{Editing: a.Name, Name: a.Name, Targets: strings.Join(ts, ", "), Fallbacks: strings.Join(a.Fallbacks, ", ")}
}

func (p *Pages) showAliases(c *gin.Context, status int, formErr, flash string, form templates.AliasForm) {
	page, _, _, err := p.page(c, "Model aliases")
	if err != nil {
		p.fail(c, err)
		return
	}
	as, err := p.aliases.List(c.Request.Context())
	if err != nil {
		p.fail(c, err)
		return
	}
	view := templates.AdminAliasesView{Form: form}
	if p.models != nil {
		for _, m := range p.models() {
			if m != "*" {
				view.Models = append(view.Models, m)
			}
		}
	}
	view.Models = append(view.Models, models.LocalModel)
	for _, a := range as {
		total := 0
		for _, t := range a.Targets {
			total += t.Weight
		}
		row := templates.AliasRow{Name: a.Name, Fallbacks: a.Fallbacks,
			EditURL:   "/admin/aliases?" + url.Values{"edit": {a.Name}}.Encode() + "#alias-form",
			DeleteURL: "/admin/aliases/" + a.Name + "/delete", Updated: formatTime(a.UpdatedAt)}
		if a.UpdatedByEmail != "" {
			row.Updated += " by " + a.UpdatedByEmail
		}
		for _, t := range a.Targets {
			row.Targets = append(row.Targets, templates.AliasTargetRow{Model: t.Model, Weight: t.Weight, Share: share(t.Weight, total)})
		}
		view.Aliases = append(view.Aliases, row)
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminAliases(page, view))
}

// share is weight's part of total as a whole percentage, or with one
// decimal when that would round to 0 or 100 while it is neither.
func share(weight, total int) string {
	if total <= 0 {
		return ""
	}
	pct := float64(weight) * 100 / float64(total)
	s := strconv.FormatFloat(pct, 'f', 0, 64)
	if (s == "0" || s == "100") && weight != 0 && weight != total {
		s = strconv.FormatFloat(pct, 'f', 1, 64)
	}
	return s + "%"
}

// aliasForm reads the form: targets as "model=weight" (weight 1 when left
// out) and fallbacks, each list separated by commas or new lines.
func aliasForm(c *gin.Context) (templates.AliasForm, models.ModelAliasInput, error) {
	form := templates.AliasForm{Name: strings.TrimSpace(c.PostForm("name")), Targets: strings.TrimSpace(c.PostForm("targets")),
		Fallbacks: strings.TrimSpace(c.PostForm("fallbacks"))}
	in := models.ModelAliasInput{Name: form.Name, Fallbacks: []string{}}
	for _, part := range splitList(form.Targets) {
		model, weight, hasWeight := strings.Cut(part, "=")
		t := models.AliasTarget{Model: strings.TrimSpace(model), Weight: 1}
		if hasWeight {
			w, err := strconv.Atoi(strings.TrimSpace(weight))
			if err != nil {
				return form, in, apperr.New(apperr.Unprocessable,
					"Write each target as model=weight with a whole-number weight, e.g. gpt-4o-mini=70, claude-3-5-haiku=30.")
			}
			t.Weight = w
		}
		in.Targets = append(in.Targets, t)
	}
	in.Fallbacks = append(in.Fallbacks, splitList(form.Fallbacks)...)
	return form, in, nil
}

// splitList splits a list typed with commas or new lines, leaving out
// empty entries.
func splitList(s string) []string {
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' })
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return slices.Clip(out)
}

// CreateAlias adds an alias from the form; a refused form comes back with
// what was typed and why.
func (p *Pages) CreateAlias(c *gin.Context) {
	form, in, err := aliasForm(c)
	if err == nil {
		u, _ := userOf(c)
		_, err = p.aliases.Create(c.Request.Context(), u.User, in)
	}
	if err != nil {
		p.aliasRefused(c, err, form)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/aliases?done=added")
}

// UpdateAlias replaces an alias's targets and fallbacks from the form.
func (p *Pages) UpdateAlias(c *gin.Context) {
	name := c.Param("name")
	form, in, err := aliasForm(c)
	form.Editing, form.Name = name, name
	if err == nil {
		u, _ := userOf(c)
		_, err = p.aliases.Update(c.Request.Context(), u.User, name, in)
	}
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			p.fail(c, err)
			return
		}
		p.aliasRefused(c, err, form)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/aliases?done=saved")
}

// aliasRefused shows the form again with the refusal, or the error page
// for a failure on our side.
func (p *Pages) aliasRefused(c *gin.Context, err error, form templates.AliasForm) {
	if status, msg, ok := adminFormProblem(err); ok {
		p.showAliases(c, status, msg, "", form)
		return
	}
	p.fail(c, err)
}

// DeleteAlias removes an alias.
func (p *Pages) DeleteAlias(c *gin.Context) {
	u, _ := userOf(c)
	if err := p.aliases.Delete(c.Request.Context(), u.User, c.Param("name")); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/aliases?done=deleted")
}
