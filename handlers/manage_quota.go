package handlers

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/models"
)

type freezeOut struct {
	ID          int64      `json:"id"`
	TokenID     int64      `json:"token_id"`
	OrgID       int64      `json:"organization_id"`
	Reason      string     `json:"reason"`
	WindowCount int        `json:"window_count"`
	FrozenFrom  time.Time  `json:"frozen_from"`
	FrozenUntil time.Time  `json:"frozen_until"`
	LiftedAt    *time.Time `json:"lifted_at"`
	Active      bool       `json:"active"`
}

func (m *manage) toFreezeOut(f models.Freeze) freezeOut {
	return freezeOut{f.ID, f.TokenID, f.OrgID, f.Reason, f.WindowCount, f.FrozenFrom, f.FrozenUntil, f.LiftedAt, f.Active(m.Now())}
}

func (m *manage) freezesOut(fs []models.Freeze) []freezeOut {
	out := make([]freezeOut, len(fs))
	for i, f := range fs {
		out[i] = m.toFreezeOut(f)
	}
	return out
}

// myFreezes lists the caller's organization's freezes and why they happened.
func (m *manage) myFreezes(c *gin.Context) {
	fs, err := m.Store.OrganizationFreezes(c.Request.Context(), currentUser(c).OrgID, 50)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"data": m.freezesOut(fs)})
}

// listFreezes lists every organization's latest freezes, for admins.
func (m *manage) listFreezes(c *gin.Context) {
	fs, err := m.Store.Freezes(c.Request.Context(), 200)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"data": m.freezesOut(fs)})
}

// liftFreeze ends a freeze early, on every node.
func (m *manage) liftFreeze(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	f, err := m.Accounts.LiftFreeze(c.Request.Context(), currentUser(c).User, id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, m.toFreezeOut(f))
}

type tuningOut struct {
	At   time.Time `json:"at"`
	Tier string    `json:"tier"`
	From float64   `json:"from_refill_per_sec"`
	To   float64   `json:"to_refill_per_sec"`
	Load float64   `json:"load"`
}

// listTuning lists the auto-tuner's latest changes.
func (m *manage) listTuning(c *gin.Context) {
	es, err := m.Store.TuningEvents(c.Request.Context(), 200)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]tuningOut, len(es))
	for i, e := range es {
		out[i] = tuningOut{e.CreatedAt, e.Tier, e.FromRefill, e.ToRefill, e.Load}
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// limiterState says whether limits are local, shared or degraded.
func (m *manage) limiterState(c *gin.Context) { c.JSON(http.StatusOK, m.LimiterStatus()) }
