package handlers

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// aliasOut is a model alias as the admin API shows it.
type aliasOut struct {
	Name      string           `json:"name"`
	Targets   []aliasTargetOut `json:"targets"`
	Fallbacks []string         `json:"fallbacks"`
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
	UpdatedBy string           `json:"updated_by"` // the admin's email; "" for the system
}

type aliasTargetOut struct {
	Model  string `json:"model"`
	Weight int    `json:"weight"`
}

func toAliasOut(a models.ModelAlias) aliasOut {
	ts := make([]aliasTargetOut, len(a.Targets))
	for i, t := range a.Targets {
		ts[i] = aliasTargetOut{t.Model, t.Weight}
	}
	fs := a.Fallbacks
	if fs == nil {
		fs = []string{}
	}
	return aliasOut{a.Name, ts, fs, a.CreatedAt.UTC(), a.UpdatedAt.UTC(), a.UpdatedByEmail}
}

// aliasIn is an alias as the API takes it. A target's weight defaults to
// 1; on update, omitted targets or fallbacks keep their value.
type aliasIn struct {
	Name    string `json:"name"`
	Targets *[]struct {
		Model  string `json:"model"`
		Weight *int   `json:"weight"`
	} `json:"targets"`
	Fallbacks *[]string `json:"fallbacks"`
}

// apply merges the given fields into a.
func (in aliasIn) apply(a *models.ModelAliasInput) {
	if in.Targets != nil {
		a.Targets = make([]models.AliasTarget, len(*in.Targets))
		for i, t := range *in.Targets {
			a.Targets[i] = models.AliasTarget{Model: t.Model, Weight: 1}
			set(&a.Targets[i].Weight, t.Weight)
		}
	}
	set(&a.Fallbacks, in.Fallbacks)
}

func (m *manage) listAliases(c *gin.Context) {
	as, err := m.Aliases.List(c.Request.Context())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]aliasOut, len(as))
	for i, a := range as {
		out[i] = toAliasOut(a)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// createAlias defines an alias; it is in force on every node at once.
func (m *manage) createAlias(c *gin.Context) {
	var in aliasIn
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	a := models.ModelAliasInput{Name: in.Name}
	in.apply(&a)
	out, err := m.Aliases.Create(c.Request.Context(), currentUser(c).User, a)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, toAliasOut(out))
}

// updateAlias replaces an alias's targets or fallbacks, or both. An alias
// keeps its name: clients call it by that name, so a new name is a new
// alias (and the old one's deletion).
func (m *manage) updateAlias(c *gin.Context) {
	var in aliasIn
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	name := c.Param("name")
	if in.Name != "" && in.Name != name {
		writeAPIError(c, m.log, apperr.Field(apperr.Unprocessable, "invalid_alias", "name",
			"an alias cannot be renamed: clients call it by its name; create '"+in.Name+"' and delete '"+name+"' instead"))
		return
	}
	ctx := c.Request.Context()
	cur, ok := m.Aliases.Alias(name)
	if !ok {
		// Not on this node yet, perhaps: the store is the authority.
		as, err := m.Aliases.List(ctx)
		if err != nil {
			writeAPIError(c, m.log, err)
			return
		}
		for i := range as {
			if as[i].Name == name {
				cur, ok = &as[i], true
			}
		}
	}
	if !ok {
		writeAPIError(c, m.log, apperr.New(apperr.NotFound, "alias %s not found", name))
		return
	}
	a := models.ModelAliasInput{Name: name, Targets: cur.Targets, Fallbacks: cur.Fallbacks}
	in.apply(&a)
	out, err := m.Aliases.Update(ctx, currentUser(c).User, name, a)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toAliasOut(out))
}

func (m *manage) deleteAlias(c *gin.Context) {
	name := c.Param("name")
	if err := m.Aliases.Delete(c.Request.Context(), currentUser(c).User, name); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"name": name, "deleted": true})
}
