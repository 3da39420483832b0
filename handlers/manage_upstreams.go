package handlers

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
)

type upstreamOut struct {
	ID             int64     `json:"id"`
	Name           string    `json:"name"`
	BaseURL        string    `json:"base_url"`
	KeyLast4       string    `json:"api_key_last4"`
	Weight         int       `json:"weight"`
	RPM            int64     `json:"rpm"`
	TPM            int64     `json:"tpm"`
	Models         []string  `json:"models"`
	State          string    `json:"state"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// upstreamsOut joins stored keys with their live state in the pool. The
// key itself never leaves: only its last four characters.
func (m *manage) upstreamsOut(ks []models.UpstreamKey) []upstreamOut {
	states := map[int64]upstream.KeyStatus{}
	for _, s := range m.PoolStatus() {
		states[s.ID] = s
	}
	out := make([]upstreamOut, len(ks))
	for i, k := range ks {
		state := string(upstream.Healthy)
		if s, ok := states[k.ID]; ok {
			state = string(s.State)
		}
		if k.DisabledAt != nil {
			state = string(upstream.Disabled)
		}
		ms := k.ModelList()
		if ms == nil {
			ms = []string{}
		}
		out[i] = upstreamOut{k.ID, k.Name, k.BaseURL, k.KeyLast4, k.Weight, k.RPM, k.TPM, ms, state, k.DisabledReason, k.CreatedAt}
	}
	return out
}

func (m *manage) listUpstreams(c *gin.Context) {
	ks, err := m.Store.UpstreamKeys(c.Request.Context())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"data": m.upstreamsOut(ks)})
}

func (m *manage) createUpstream(c *gin.Context) {
	var in struct {
		Name    string   `json:"name"`
		BaseURL string   `json:"base_url"`
		APIKey  string   `json:"api_key"`
		Weight  *int     `json:"weight"`
		RPM     int64    `json:"rpm"`
		TPM     int64    `json:"tpm"`
		Models  []string `json:"models"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	weight := 1
	set(&weight, in.Weight)
	k, err := m.Providers.Create(c.Request.Context(), currentUser(c), models.UpstreamKeyInput{
		Name: in.Name, BaseURL: in.BaseURL, APIKey: in.APIKey, Weight: weight, RPM: in.RPM, TPM: in.TPM, Models: in.Models})
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, m.upstreamsOut([]models.UpstreamKey{k})[0])
}

func (m *manage) deleteUpstream(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if err := m.Providers.Delete(c.Request.Context(), currentUser(c), id); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": id, "deleted": true})
}
