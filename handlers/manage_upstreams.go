package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
)

type upstreamOut struct {
	ID             int64     `json:"id"`
	Name           string    `json:"name"`
	Provider       string    `json:"provider"`
	BaseURL        string    `json:"base_url"`
	KeyLast4       string    `json:"api_key_last4"`
	Weight         int       `json:"weight"`
	RPM            int64     `json:"rpm"`
	TPM            int64     `json:"tpm"`
	Models         []string  `json:"models"`
	State          string    `json:"state"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// Limits is how the node that answers paces the key, per dimension, and
	// what the provider's x-ratelimit-* headers last told it; each node
	// learns from its own answers.
	Limits limitsOut `json:"limits"`
}

type limitsOut struct {
	Requests dimensionOut `json:"requests"`
	Tokens   dimensionOut `json:"tokens"`
}

// dimensionOut is one dimension of upstream.Limits. The provider's fields
// are null until it has sent its headers.
type dimensionOut struct {
	PerMinute int64             `json:"per_minute"` // paced to; 0 = not paced
	Burst     int64             `json:"burst"`      // the pacing bucket's capacity now
	Shrinks   int64             `json:"shrinks"`    // 429s that halved the burst
	Provider  *providerLimitOut `json:"provider"`
}

type providerLimitOut struct {
	Limit     int64     `json:"limit"` // per minute
	Remaining int64     `json:"remaining"`
	ResetAt   time.Time `json:"reset_at"` // when its window is full again
	Burst     int64     `json:"burst"`    // its real burst, estimated from remaining and reset
	SeenAt    time.Time `json:"seen_at"`
}

func dimensionOf(l upstream.Limits) dimensionOut {
	d := dimensionOut{PerMinute: l.PerMinute, Burst: l.Burst, Shrinks: l.Shrinks}
	if !l.Seen.IsZero() {
		d.Provider = &providerLimitOut{Limit: l.Limit, Remaining: l.Remaining, ResetAt: l.Reset, Burst: l.ProviderBurst, SeenAt: l.Seen}
	}
	return d
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
		var limits limitsOut
		if s, ok := states[k.ID]; ok {
			state = string(s.State)
			limits = limitsOut{dimensionOf(s.RequestLimits), dimensionOf(s.TokenLimits)}
		}
		if k.DisabledAt != nil {
			state = string(upstream.Disabled)
		}
		ms := k.ModelList()
		if ms == nil {
			ms = []string{}
		}
		out[i] = upstreamOut{k.ID, k.Name, k.Provider, k.BaseURL, k.KeyLast4, k.Weight, k.RPM, k.TPM, ms, state, k.DisabledReason, k.CreatedAt, limits}
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
		Name string `json:"name"`
		// The kind of provider, whose wire format Sluice speaks to it:
		// openai (any OpenAI-compatible API, the default), anthropic,
		// gemini or azure.
		Provider string `json:"provider"`
		BaseURL  string `json:"base_url"`
		APIKey   string `json:"api_key"`
		Weight   *int   `json:"weight"`
		// Read as written, not as int64, so that 1e12 is the whole number
		// it is and anything else is refused naming the field.
		RPM    json.RawMessage `json:"rpm"`
		TPM    json.RawMessage `json:"tpm"`
		Models []string        `json:"models"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	weight := 1
	set(&weight, in.Weight)
	rpm, err := jsonRate("rpm", in.RPM)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	tpm, err := jsonRate("tpm", in.TPM)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	k, err := m.Providers.Create(c.Request.Context(), currentUser(c).User, models.UpstreamKeyInput{
		Name: in.Name, Provider: in.Provider, BaseURL: in.BaseURL, APIKey: in.APIKey, Weight: weight, RPM: rpm, TPM: tpm, Models: in.Models})
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, m.upstreamsOut([]models.UpstreamKey{k})[0])
}

// jsonRate reads an RPM or TPM from the JSON body: a number (absent or
// null is 0, unknown). A string or anything else is refused like a bad
// number, naming the field.
func jsonRate(field string, raw json.RawMessage) (int64, error) {
	s := string(raw)
	if s == "null" {
		s = ""
	}
	if strings.HasPrefix(s, `"`) {
		s = "not a number"
	}
	return models.ParseKeyRate(field, s)
}

func (m *manage) deleteUpstream(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if err := m.Providers.Delete(c.Request.Context(), currentUser(c).User, id); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": id, "deleted": true})
}
