package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/templates"
)

// adminPriceFlashes are the prices page's messages after a change.
var adminPriceFlashes = map[string]string{
	"price": "Price set. Requests from now on cost the new price; usage already metered keeps its own.",
}

// AdminPrices lists every model's price and flags the models served or
// metered without one; ?model= fills the form for that model.
func (p *Pages) AdminPrices(c *gin.Context) {
	p.showPrices(c, http.StatusOK, "", adminPriceFlashes[c.Query("done")], templates.AdminPriceForm{Model: c.Query("model")})
}

func (p *Pages) showPrices(c *gin.Context, status int, formErr, flash string, form templates.AdminPriceForm) {
	page, _, _, err := p.page(c, "Prices")
	if err != nil {
		p.fail(c, err)
		return
	}
	var served []string
	if p.models != nil {
		served = p.models()
	}
	rows, err := p.billing.Prices(c.Request.Context(), served)
	if err != nil {
		p.fail(c, err)
		return
	}
	view := templates.AdminPricesView{Form: form}
	for _, r := range rows {
		row := templates.AdminPriceRow{Model: r.Model, Versions: r.Versions,
			EditURL: "/admin/prices?" + url.Values{"model": {r.Model}}.Encode() + "#set-price"}
		if cur := r.Current; cur != nil {
			row.Priced, row.Input, row.Output, row.CachedInput = true, cur.InputPerMTok.String(), cur.OutputPerMTok.String(), cur.CachedInputPerMTok.String()
			if v := cur.CacheCreationPerMTok; v != nil {
				row.CacheCreation = v.String()
			}
			if v := cur.ReasoningPerMTok; v != nil {
				row.Reasoning = v.String()
			}
			row.EffectiveFrom = formatTime(cur.EffectiveFrom)
			if form.Model == r.Model && form.Input == "" && status == http.StatusOK { // "Change": start from the current price
				view.Form.Input, view.Form.Output, view.Form.CachedInput = row.Input, row.Output, row.CachedInput
				view.Form.CacheCreation, view.Form.Reasoning = row.CacheCreation, row.Reasoning
			}
		} else {
			view.Unpriced++
		}
		view.Rows = append(view.Rows, row)
		view.Models = append(view.Models, r.Model)
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminPrices(page, view))
}

// SetPrice puts a model's new price in force from the admin's form; a
// refused form comes back with what was typed.
func (p *Pages) SetPrice(c *gin.Context) {
	form := templates.AdminPriceForm{Model: strings.TrimSpace(c.PostForm("model")), Input: strings.TrimSpace(c.PostForm("input_per_mtok")),
		Output: strings.TrimSpace(c.PostForm("output_per_mtok")), CachedInput: strings.TrimSpace(c.PostForm("cached_input_per_mtok")),
		CacheCreation: strings.TrimSpace(c.PostForm("cache_creation_per_mtok")), Reasoning: strings.TrimSpace(c.PostForm("reasoning_per_mtok"))}
	u, _ := userOf(c)
	_, err := p.billing.SetPrice(c.Request.Context(), u.User, form.Model, billing.PriceInput{Input: form.Input, Output: form.Output,
		CachedInput: form.CachedInput, CacheCreation: form.CacheCreation, Reasoning: form.Reasoning})
	if err != nil {
		if status, msg, ok := adminFormProblem(err); ok {
			p.showPrices(c, status, msg, "", form)
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/prices?done=price")
}
