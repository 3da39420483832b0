package web

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

var adminFlashes = map[string]string{
	"tier": "Tier saved. The next API request uses the new limits.",
	"org":  "Organization moved. Its next API request uses the new tier.",
}

// AdminTiers shows the tiers with editable limits and the organizations.
func (p *Pages) AdminTiers(c *gin.Context) {
	p.showAdmin(c, http.StatusOK, "", adminFlashes[c.Query("done")])
}

func (p *Pages) showAdmin(c *gin.Context, status int, formErr, flash string) {
	page, _, _, err := p.page(c, "Tiers")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	tiers, err := p.store.Tiers(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	orgs, err := p.store.Organizations(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	var view templates.AdminTiersView
	for _, t := range tiers {
		view.Tiers = append(view.Tiers, templates.TierRow{Name: t.Name, Capacity: t.Capacity, RefillPerSec: formatRate(t.RefillPerSec),
			Autotune: t.Autotune, RefillFloor: formatRate(t.RefillFloor)})
		view.TierNames = append(view.TierNames, t.Name)
	}
	for _, o := range orgs {
		view.Orgs = append(view.Orgs, templates.OrgRow{ID: o.ID, Name: o.Name, Tier: o.Tier.Name, Created: formatTime(o.CreatedAt)})
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminTiers(page, view))
}

// UpdateTier saves a tier's capacity and refill from the admin form.
func (p *Pages) UpdateTier(c *gin.Context) {
	capacity, err1 := strconv.ParseInt(c.PostForm("capacity"), 10, 64)
	refill, err2 := strconv.ParseFloat(c.PostForm("refill_per_sec"), 64)
	if err1 != nil || err2 != nil {
		p.showAdmin(c, http.StatusUnprocessableEntity, "Capacity must be a whole number and refill a number of requests per second.", "")
		return
	}
	u, _ := userOf(c)
	_, err := p.accounts.UpdateTier(c.Request.Context(), u, c.Param("name"), models.TierLimits{Capacity: capacity, RefillPerSec: refill})
	if err != nil {
		if code := apperr.CodeOf(err); code == apperr.Unprocessable {
			p.showAdmin(c, http.StatusUnprocessableEntity, apperr.As(err).Message, "")
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=tier")
}

// SetOrganizationTier moves an organization to another tier.
func (p *Pages) SetOrganizationTier(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		p.fail(c, apperr.New(apperr.NotFound, "No such organization."))
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.SetOrganizationTier(c.Request.Context(), u, id, c.PostForm("tier")); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=org")
}
