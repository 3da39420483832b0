// Package templates renders Sluice's pages with templ. Components take the
// plain view models of this file, never database rows, so a page cannot leak
// a field (a password hash, a token hash) that nobody put in its view.
package templates

// Page is what every page's frame needs.
type Page struct {
	Title string
	User  *UserNav // nil for anonymous visitors
	Flash string   // a success message, shown once
	Error string   // a problem with the submitted form, shown above it
}

// UserNav is the signed-in user as the navigation shows them.
type UserNav struct {
	Email   string
	OrgName string
	IsAdmin bool
}

// LoginView refills the login form after a failed attempt.
type LoginView struct {
	Email string
}

// SignupView refills the signup form after a failed attempt.
type SignupView struct {
	Email        string
	Organization string
}

// DashboardView is an organization's overview.
type DashboardView struct {
	OrgName       string
	TierName      string
	Capacity      int64
	RefillPerSec  string // formatted, e.g. "0.5"
	RequestsToday int64
	TokensToday   int64
	RequestsMonth int64
	TokensMonth   int64
	ActiveTokens  int
	Tokens        []TokenRow // the latest few
	// TokensPerMinute is the tier's tokens-per-minute limit, 0 for none.
	TokensPerMinute int64
	// EffectiveRefill is set when the auto-tuner has lowered the refill
	// under load, e.g. "0.3"; empty when the tier runs as configured.
	EffectiveRefill string
	Freezes         []FreezeRow // the organization's latest freezes
}

// TokensView is the token page: the list, the create form and, right after
// creating one, the token's secret, shown this once.
type TokensView struct {
	Tokens   []TokenRow
	NewToken *NewTokenView
	Form     TokenForm
}

// TokenRow is one API token as its owner sees it.
type TokenRow struct {
	ID       int64
	Name     string
	Prefix   string // e.g. "sk_sluice_AbC123"
	Created  string
	LastUsed string // "never" when unused
	Expires  string // "never" when it does not expire
	Status   string // active | revoked | expired
}

// NewTokenView carries a just-created token's secret.
type NewTokenView struct {
	Name   string
	Secret string
}

// TokenForm refills the create form after a failed attempt.
type TokenForm struct {
	Name          string
	ExpiresInDays string
}

// AdminTiersView is the admin page for tiers and organizations.
type AdminTiersView struct {
	Tiers     []TierRow
	Orgs      []OrgRow
	TierNames []string
	Freezes   []FreezeRow  // latest freezes of every organization
	Tuning    []TuningRow  // the auto-tuner's latest changes
	Limiter   LimiterState // where bucket state lives right now
}

// LimiterState describes the rate limiter's backend for admins.
type LimiterState struct {
	Mode     string // "local" (one node, in memory), "shared" (Redis) or "degraded" (Redis unreachable: local at a per-node share)
	Nodes    int    // SLUICE_EXPECTED_NODES
	Degraded bool
}

// FreezeRow is one freeze of a token.
type FreezeRow struct {
	ID          int64
	TokenID     int64
	TokenPrefix string // e.g. "sk_sluice_AbC123"; empty if unknown
	OrgName     string // shown to admins; empty on a user's own dashboard
	Reason      string
	Count       int    // rejections in the window that triggered it
	From        string // formatted time
	Until       string
	Status      string // active | lifted | expired
}

// TuningRow is one auto-tuner change.
type TuningRow struct {
	At   string
	Tier string
	From string // refill per second before, e.g. "0.5"
	To   string
	Load string // e.g. "0.92"
}

// TierRow is one tier with its editable limits.
type TierRow struct {
	Name             string
	Capacity         int64
	RefillPerSec     string
	EffectiveRefill  string // what applies now; differs from RefillPerSec while the auto-tuner holds it down
	TokensPerMinute  int64
	FreezeThreshold  int
	FreezeMinutes    int
	Autotune         bool
	RefillFloor      string
	UpstreamFallback string // "local" or "error"
}

// AdminUpstreamsView is the admin page of provider keys.
type AdminUpstreamsView struct {
	Keys []UpstreamRow
	Form UpstreamForm // refilled after a failed attempt
}

// UpstreamRow is one provider key; the key itself is never in a view, only
// its last four characters.
type UpstreamRow struct {
	ID       int64
	Name     string
	BaseURL  string
	Last4    string
	Weight   int
	RPM      int64
	TPM      int64
	Models   string // comma-separated, "any" when empty
	State    string // healthy | cooling | open | disabled
	Reason   string // why it is open or disabled
	Requests int64
	Failures int64
}

// UpstreamForm is the add-a-key form.
type UpstreamForm struct {
	Name    string
	BaseURL string
	Weight  string
	RPM     string
	TPM     string
	Models  string
}

// OrgRow is one organization for the admin.
type OrgRow struct {
	ID      int64
	Name    string
	Tier    string
	Created string
}
