package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
	"github.com/sluicehq/sluice/upstream"
)

var upstreamFlashes = map[string]string{
	"added":   "Key added and in rotation on every node.",
	"deleted": "Key deleted.",
}

// AdminUpstreams lists provider keys with their live state.
func (p *Pages) AdminUpstreams(c *gin.Context) {
	p.showUpstreams(c, http.StatusOK, "", templates.UpstreamForm{}, upstreamFlashes[c.Query("done")])
}

func (p *Pages) showUpstreams(c *gin.Context, status int, formErr string, form templates.UpstreamForm, flash string) {
	page, _, _, err := p.page(c, "Upstream providers")
	if err != nil {
		p.fail(c, err)
		return
	}
	ks, err := p.store.UpstreamKeys(c.Request.Context())
	if err != nil {
		p.fail(c, err)
		return
	}
	now := p.now()
	live := map[int64]upstream.KeyStatus{}
	for _, s := range p.poolStatus() {
		live[s.ID] = s
	}
	view := templates.AdminUpstreamsView{Form: form, Providers: upstream.Kinds()}
	for _, k := range ks {
		row := templates.UpstreamRow{ID: k.ID, Name: k.Name, Provider: k.Provider, BaseURL: k.BaseURL, Last4: k.KeyLast4, Weight: k.Weight,
			RPM: k.RPM, TPM: k.TPM, Models: k.Models, State: string(upstream.Healthy)}
		if row.Models == "" {
			row.Models = "any"
		}
		if s, ok := live[k.ID]; ok {
			row.State, row.Reason, row.Requests, row.Failures = string(s.State), s.Reason, s.Requests, s.Failures
			row.RequestLimits, row.TokenLimits = limitsView(s.RequestLimits, now), limitsView(s.TokenLimits, now)
		}
		if k.DisabledAt != nil {
			row.State, row.Reason = string(upstream.Disabled), k.DisabledReason
		}
		view.Keys = append(view.Keys, row)
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminUpstreams(page, view))
}

// limitsView shows one dimension of a key's learned limits as of now.
func limitsView(l upstream.Limits, now time.Time) templates.UpstreamLimits {
	v := templates.UpstreamLimits{PerMinute: l.PerMinute, Burst: l.Burst, Shrinks: l.Shrinks}
	if !l.Seen.IsZero() {
		v.Learned, v.Limit, v.Remaining, v.ProviderBurst = true, l.Limit, l.Remaining, l.ProviderBurst
		if d := l.Reset.Sub(now); d > 0 {
			v.Reset = d.Round(time.Millisecond).String()
		}
	}
	return v
}

// CreateUpstream adds a provider key from the form.
func (p *Pages) CreateUpstream(c *gin.Context) {
	form := templates.UpstreamForm{Name: c.PostForm("name"), Provider: c.PostForm("provider"), BaseURL: c.PostForm("base_url"), Weight: c.PostForm("weight"),
		RPM: c.PostForm("rpm"), TPM: c.PostForm("tpm"), Models: c.PostForm("models")}
	weight, err := strconv.Atoi(orZero(form.Weight))
	if err != nil {
		p.showUpstreams(c, http.StatusUnprocessableEntity, "Weight, RPM and TPM must be whole numbers.", form, "")
		return
	}
	// RPM and TPM as the API reads them: 1e12 is a whole number.
	rpm, err := models.ParseKeyRate("rpm", form.RPM)
	var tpm int64
	if err == nil {
		tpm, err = models.ParseKeyRate("tpm", form.TPM)
	}
	if err == nil {
		err = p.createUpstream(c, form, weight, rpm, tpm)
	}
	if err != nil {
		if status := apperr.Status(apperr.CodeOf(err)); status < 500 {
			p.showUpstreams(c, status, apperr.As(err).Message, form, "")
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/upstreams?done=added")
}

// createUpstream stores the key the form describes.
func (p *Pages) createUpstream(c *gin.Context, form templates.UpstreamForm, weight int, rpm, tpm int64) error {
	var ms []string
	for _, m := range strings.Split(form.Models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			ms = append(ms, m)
		}
	}
	u, _ := userOf(c)
	_, err := p.providers.Create(c.Request.Context(), u.User, models.UpstreamKeyInput{Name: form.Name, Provider: form.Provider, BaseURL: strings.TrimSpace(form.BaseURL),
		APIKey: strings.TrimSpace(c.PostForm("api_key")), Weight: weight, RPM: rpm, TPM: tpm, Models: ms})
	return err
}

// DeleteUpstream removes a provider key.
func (p *Pages) DeleteUpstream(c *gin.Context) {
	id, ok := p.pathID(c, "No such provider key.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if err := p.providers.Delete(c.Request.Context(), u.User, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/upstreams?done=deleted")
}

func orZero(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "0"
	}
	return s
}
