package handlers

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// manage serves the management JSON API: the dashboard's operations for
// automation, authenticated by a session JWT bearer.
type manage struct {
	Deps
	log *slog.Logger
}

const userKey = "sluice.user"

// authenticateSession loads the user of a bearer session token.
func (m *manage) authenticateSession(c *gin.Context) {
	tok := bearer(c.Request)
	if tok == "" {
		writeAPIError(c, m.log, apperr.WithReason(apperr.Unauthorized, "missing_session", "sign in first: send 'Authorization: Bearer <token from /api/auth/login>'"))
		return
	}
	u, err := m.Sessions.Resume(c.Request.Context(), m.Store, tok)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.Set(userKey, u)
	c.Next()
}

// requireAdmin lets only admins through.
func (m *manage) requireAdmin(c *gin.Context) {
	if !currentUser(c).IsAdmin() {
		writeAPIError(c, m.log, apperr.New(apperr.Forbidden, "this endpoint is for admins"))
		return
	}
	c.Next()
}

// requireOrganization lets through only a user acting in an organization:
// one removed from their last organization may still sign in, list their
// organizations and accept an invitation, and nothing else.
func (m *manage) requireOrganization(c *gin.Context) {
	if err := accounts.NeedOrganization(currentUser(c)); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.Next()
}

// ownersMay lets only the organization's owners through, saying what is
// theirs to do ("set its budget"), before a body is read.
func (m *manage) ownersMay(what string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := accounts.NeedOwner(currentUser(c), what); err != nil {
			writeAPIError(c, m.log, err)
			return
		}
		c.Next()
	}
}

// currentUser is who the session is: its user acting in the session's
// organization, with their role there.
func currentUser(c *gin.Context) models.Member { return c.MustGet(userKey).(models.Member) }

// decode reads a strict JSON body: unknown fields are errors, because a
// misspelt setting silently ignored is worse than a 400.
func (m *manage) decode(c *gin.Context, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, m.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return apperr.WithReason(apperr.TooLarge, "request_too_large", "request body is too large")
		}
		if errors.Is(err, io.EOF) {
			return apperr.WithReason(apperr.Invalid, "invalid_json", "request body is empty")
		}
		return apperr.WithReason(apperr.Invalid, "invalid_json", "request body is not valid JSON for this endpoint: "+decodeProblem(err))
	}
	return nil
}

// decodeProblem names the offending field without echoing values.
func decodeProblem(err error) string {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return "field '" + typ.Field + "' must be " + typ.Type.String()
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}

type userOut struct {
	ID    int64       `json:"id"`
	Email string      `json:"email"`
	Role  models.Role `json:"role"`
}

type orgOut struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Tier      string    `json:"tier"`
	CreatedAt time.Time `json:"created_at"`
}

func toUserOut(u models.Member) userOut { return userOut{ID: u.ID, Email: u.Email, Role: u.Role} }

func toOrgOut(o models.Organization) orgOut {
	return orgOut{ID: o.ID, Name: o.Name, Tier: o.Tier.Name, CreatedAt: o.CreatedAt}
}

// signup answers POST /api/auth/signup {email, password, organization}:
// a new organization with the user as its owner; with {invitation: code}
// instead of an organization, the user joins the invitation's. Where
// Sluice sends mail, a signup without an invitation is 202 and a link
// confirms it (requestSignup). Without mail a taken address is 409
// email_taken: there is no other way to tell the person, and the account
// must work at once.
func (m *manage) signup(c *gin.Context) {
	var in struct {
		Email        string `json:"email"`
		Password     string `json:"password"`
		Organization string `json:"organization"`
		Invitation   string `json:"invitation"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var (
		u   models.Member
		o   models.Organization
		err error
	)
	switch {
	case in.Invitation != "" && in.Organization != "":
		err = apperr.Field(apperr.Unprocessable, "organization_with_invitation", "organization",
			"leave organization out when signing up with an invitation: you join the invitation's organization")
	case in.Invitation != "":
		u, o, err = m.Accounts.SignupByInvitation(c.Request.Context(), in.Email, in.Password, in.Invitation, c.ClientIP())
	case m.Accounts.MailOn():
		// Nothing is made until the address is confirmed, and a taken
		// address is answered as a new one is.
		m.requestSignup(c, in.Email, in.Password, in.Organization)
		return
	default:
		u, o, err = m.Accounts.Signup(c.Request.Context(), in.Email, in.Password, in.Organization, c.ClientIP())
	}
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	tok, expires, err := m.Sessions.Start(c.Request.Context(), m.Store, u)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"token": tok, "expires_at": expires.UTC(), "user": toUserOut(u), "organization": toOrgOut(o)})
}

func (m *manage) login(c *gin.Context) {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	u, err := m.Accounts.Login(c.Request.Context(), in.Email, in.Password, c.ClientIP())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	tok, expires, err := m.Sessions.Start(c.Request.Context(), m.Store, u)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"token": tok, "expires_at": expires.UTC()})
}

// logout answers POST /api/auth/logout: the bearer session is ended on the
// server, on every node at once.
func (m *manage) logout(c *gin.Context) {
	if err := m.Sessions.End(c.Request.Context(), m.Store, bearer(c.Request)); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

type tokenOut struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	Status     string     `json:"status"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	// SigningRequired: the token takes only signed requests.
	SigningRequired bool `json:"signing_required"`
	// The token's controls; null for none.
	Models            []string `json:"models"`
	MonthlyBudget     *string  `json:"monthly_budget"`
	RequestsPerMinute *int64   `json:"requests_per_minute"`
	AllowedIPs        []string `json:"allowed_ips"`
}

func (m *manage) toTokenOut(t models.APIToken) tokenOut {
	out := tokenOut{ID: t.ID, Name: t.Name, Prefix: t.Prefix, Status: t.Status(m.Now()),
		CreatedAt: t.CreatedAt, LastUsedAt: t.LastUsedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt,
		SigningRequired: t.SigningRequired(), Models: t.Models, RequestsPerMinute: t.RequestsPerMinute, AllowedIPs: t.AllowedIPs}
	if b := t.MonthlyBudget; b != nil {
		s := b.String()
		out.MonthlyBudget = &s
	}
	return out
}

// tokenSettingsIn are the settings of POST and PATCH /api/tokens that may
// be set or removed. Each is kept raw so that a field left out (keep it)
// differs from null (remove the control).
type tokenSettingsIn struct {
	ExpiresAt         json.RawMessage `json:"expires_at"`
	Models            json.RawMessage `json:"models"`
	MonthlyBudget     json.RawMessage `json:"monthly_budget"`
	RequestsPerMinute json.RawMessage `json:"requests_per_minute"`
	AllowedIPs        json.RawMessage `json:"allowed_ips"`
}

// patch reads the settings given, each checked for its type with a
// message naming it (the values themselves are checked by the store).
func (in tokenSettingsIn) patch() (models.TokenPatch, error) {
	var p models.TokenPatch
	var err error
	if p.ExpiresAt, err = rawChange(in.ExpiresAt, "expires_at", `an RFC 3339 time such as "2027-01-31T00:00:00Z"`, func(s string) (*time.Time, error) {
		t, err := time.Parse(time.RFC3339, s)
		return &t, err
	}); err != nil {
		return p, err
	}
	if p.MonthlyBudget, err = rawChange(in.MonthlyBudget, "monthly_budget", `a decimal string of dollars such as "12.50"`, func(s string) (*money.Amount, error) {
		a, err := money.ParseAmount(s)
		return &a, err
	}); err != nil {
		return p, err
	}
	if p.Models, err = rawList(in.Models, "models", "an array of model or alias names"); err != nil {
		return p, err
	}
	if p.AllowedIPs, err = rawList(in.AllowedIPs, "allowed_ips", `an array of networks such as "203.0.113.0/24"`); err != nil {
		return p, err
	}
	if raw := in.RequestsPerMinute; len(raw) > 0 {
		p.RequestsPerMinute.Set = true
		if string(raw) != "null" {
			var n int64
			if err := json.Unmarshal(raw, &n); err != nil {
				return p, apperr.Field(apperr.Invalid, "invalid_requests_per_minute", "requests_per_minute",
					"requests_per_minute must be a whole number of requests, or null for none")
			}
			p.RequestsPerMinute.To = &n
		}
	}
	return p, nil
}

// rawChange reads a field that is a JSON string parsed by parse, or null.
func rawChange[T any](raw json.RawMessage, field, shape string, parse func(string) (*T, error)) (models.Change[*T], error) {
	var c models.Change[*T]
	if len(raw) == 0 {
		return c, nil
	}
	c.Set = true
	if string(raw) == "null" {
		return c, nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	if err == nil {
		c.To, err = parse(s)
	}
	if err != nil {
		return c, apperr.Field(apperr.Invalid, "invalid_"+field, field, field+" must be "+shape+", or null for none")
	}
	return c, nil
}

// rawList reads a field that is an array of strings, or null.
func rawList(raw json.RawMessage, field, shape string) (models.Change[[]string], error) {
	var c models.Change[[]string]
	if len(raw) == 0 {
		return c, nil
	}
	c.Set = true
	if string(raw) == "null" {
		return c, nil
	}
	if err := json.Unmarshal(raw, &c.To); err != nil || c.To == nil {
		return c, apperr.Field(apperr.Invalid, "invalid_"+field, field, field+" must be "+shape+", or null for none")
	}
	return c, nil
}

// createToken answers POST /api/tokens {name, expires_in_days? | expires_at?,
// models?, monthly_budget?, requests_per_minute?, allowed_ips?}: the token,
// shown this once.
func (m *manage) createToken(c *gin.Context) {
	var in struct {
		Name          string `json:"name"`
		ExpiresInDays int    `json:"expires_in_days"`
		tokenSettingsIn
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	p, err := in.patch()
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	t, secret, err := m.Accounts.IssueToken(c.Request.Context(), currentUser(c), accounts.TokenSettings{
		Name: in.Name, ExpiresInDays: in.ExpiresInDays, ExpiresAt: p.ExpiresAt.To,
		Controls: models.TokenControls{Models: p.Models.To, MonthlyBudget: p.MonthlyBudget.To,
			RequestsPerMinute: p.RequestsPerMinute.To, AllowedIPs: p.AllowedIPs.To}})
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := struct {
		tokenOut
		Token string `json:"token"`
	}{m.toTokenOut(t), secret}
	c.JSON(http.StatusCreated, out)
}

// updateToken answers PATCH /api/tokens/{id}: the settings given change,
// the others keep their value; null removes a control (or the expiry).
// An owner may change any token of the organization, a member only the
// tokens they created. Every node applies the change to its next request.
func (m *manage) updateToken(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var in struct {
		Name *string `json:"name"`
		tokenSettingsIn
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	p, err := in.patch()
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Name != nil {
		p.Name = models.Change[string]{Set: true, To: *in.Name}
	}
	t, err := m.Accounts.UpdateToken(c.Request.Context(), currentUser(c), id, p)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, m.toTokenOut(t))
}

func (m *manage) listTokens(c *gin.Context) {
	ts, err := m.Accounts.Tokens(c.Request.Context(), currentUser(c))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]tokenOut, len(ts))
	for i, t := range ts {
		out[i] = m.toTokenOut(t)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

func (m *manage) revokeToken(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	t, err := m.Accounts.RevokeToken(c.Request.Context(), currentUser(c), id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, m.toTokenOut(t))
}

// setTokenSigning answers PUT /api/tokens/{id}/signing {"required": bool}.
// Turning it on returns a new signing secret, this once.
func (m *manage) setTokenSigning(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var in struct {
		Required *bool `json:"required"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Required == nil {
		writeAPIError(c, m.log, apperr.New(apperr.Invalid, "required must be true or false"))
		return
	}
	t, secret, err := m.Accounts.SetTokenSigning(c.Request.Context(), currentUser(c), id, *in.Required)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := struct {
		tokenOut
		SigningSecret string `json:"signing_secret,omitempty"`
	}{m.toTokenOut(t), secret}
	c.JSON(http.StatusOK, out)
}

// pathID reads a positive integer path parameter; anything else cannot name
// a row, so it is a 404 like any other missing row.
func pathID(c *gin.Context, name string) (int64, error) {
	id, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, apperr.New(apperr.NotFound, "no such %s", name)
	}
	return id, nil
}

type usageTotalsOut struct {
	Requests         int64 `json:"requests"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func toUsageOut(u models.UsageTotals) usageTotalsOut {
	return usageTotalsOut{u.Requests, u.PromptTokens, u.CompletionTokens, u.TotalTokens()}
}

// usage reports the caller's organization's usage today and this month, in
// UTC; events reach the database within a second of the request.
func (m *manage) usage(c *gin.Context) {
	now := m.Now().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	orgID := currentUser(c).OrgID
	today, err := m.Store.UsageSince(c.Request.Context(), orgID, day)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	thisMonth, err := m.Store.UsageSince(c.Request.Context(), orgID, month)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"today": toUsageOut(today), "month": toUsageOut(thisMonth)})
}

// set overwrites *dst with *v when the request gave a value.
func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func (m *manage) setOrganizationTier(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var in struct {
		Tier string `json:"tier"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Tier == "" {
		writeAPIError(c, m.log, apperr.New(apperr.Unprocessable, "tier is required"))
		return
	}
	o, err := m.Accounts.SetOrganizationTier(c.Request.Context(), currentUser(c).User, id, in.Tier)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toOrgOut(o))
}
