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
	OrgName string // the organization the session acts in
	Role    string // theirs in it: member | owner
	IsAdmin bool
	// NoOrganization: they belong to none, so every page of an
	// organization's refuses them; their account page does not.
	NoOrganization bool
	// Orgs are every organization of theirs, for the switcher; it shows
	// when there are two or more.
	Orgs []OrgChoice
}

// OrgChoice is one of the user's organizations in the switcher.
type OrgChoice struct {
	ID      int64
	Name    string
	Role    string
	Current bool
}

// LoginView refills the login form after a failed attempt.
type LoginView struct {
	Email string
	// Next is the invitation page to go back to once signed in; "" for the
	// dashboard.
	Next string
	// SSOStart is the "Sign in with SSO" link; "" when single sign-on is
	// off (no button).
	SSOStart string
}

// SignupView refills the signup form after a failed attempt.
type SignupView struct {
	Email        string
	Organization string
	// MailOn: the account is made once the address is confirmed by mail.
	MailOn bool
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
	// Billing is the spend, usage charts, invoices, settings and plan
	// (billing_views.go); nil leaves those sections out.
	Billing *BillingView
	// Jobs is the queued work: jobs and batches (jobs_views.go); nil
	// leaves the section out.
	Jobs *JobsView
}

// TokensView is the token page: the list, the create form and, right after
// creating one, the token's secret, shown this once.
type TokensView struct {
	Tokens   []TokenRow
	NewToken *NewTokenView
	// SigningSecret is a token's new signing secret, right after signing
	// was turned on: shown this once.
	SigningSecret *NewTokenView
	Form          TokenForm
	// Edit refills one token's edit form, open, after a failed change;
	// nil when none failed.
	Edit *TokenEditForm
	// MaxRate is the tier's rate in requests a minute: the most a token's
	// own may be.
	MaxRate int64
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
	Signed   bool   // takes only signed requests
	// Limits are the token's controls in words, one per entry
	// ("models gpt-4o, fast", "$12.50 a month"); none: no controls.
	Limits []string
	// Editable: the viewer may change it (an owner any token of the
	// organization, a member the tokens they created) and it is not
	// revoked.
	Editable bool
	// Form is the edit form as the token stands.
	Form TokenEditForm
}

// TokenEditForm is a token's edit form: every field as text, "" for
// none.
type TokenEditForm struct {
	ID                int64
	Name              string
	ExpiresAt         string // "2027-01-31T00:00" in UTC, the input's datetime-local form
	Models            string // comma-separated
	MonthlyBudget     string // dollars, "12.50"
	RequestsPerMinute string
	AllowedIPs        string // comma-separated
}

// NewTokenView carries a secret shown once: a just-created token, or a
// token's new signing secret.
type NewTokenView struct {
	Name   string
	Secret string
}

// TokenForm refills the create form after a failed attempt.
type TokenForm struct {
	Name              string
	ExpiresInDays     string
	Models            string
	MonthlyBudget     string
	RequestsPerMinute string
	AllowedIPs        string
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

// AdminUpstreamsView is the admin page of provider keys.
type AdminUpstreamsView struct {
	Keys      []UpstreamRow
	Form      UpstreamForm // refilled after a failed attempt
	Providers []string     // the kinds of provider a key may be for, the default first
}

// UpstreamRow is one provider key; the key itself is never in a view, only
// its last four characters.
type UpstreamRow struct {
	ID       int64
	Name     string
	Provider string // the kind of provider: openai, anthropic, gemini, azure
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
	// RequestLimits and TokenLimits are how the node serving the page paces
	// the key, and what the provider's x-ratelimit-* headers last told it.
	RequestLimits, TokenLimits UpstreamLimits
}

// UpstreamLimits is one dimension (requests or tokens) of a key's limits.
type UpstreamLimits struct {
	PerMinute int64 // the rate paced to; 0 = not paced
	Burst     int64 // the pacing bucket's capacity now
	Shrinks   int64 // 429s that halved the burst
	// What the provider said; only when Learned.
	Learned       bool
	Limit         int64  // per minute
	Remaining     int64  // at its last answer
	Reset         string // until its window is full again, from now ("40ms"); "" = full now
	ProviderBurst int64  // its real burst, estimated from remaining and reset
}

// UpstreamForm is the add-a-key form.
type UpstreamForm struct {
	Name     string
	Provider string
	BaseURL  string
	Weight   string
	RPM      string
	TPM      string
	Models   string
}

// AccountView is the signed-in user's account page.
type AccountView struct {
	Email      string
	Verified   bool
	VerifiedAt string // when Verified
	MailOn     bool   // Sluice sends mail, so the address can be verified
	// PasswordError is the password form's problem.
	PasswordError string
}

// ResetRequestView is the page that asks for a reset link.
type ResetRequestView struct {
	Email   string
	MailOn  bool
	Sent    bool   // the form was sent: Message says what happens next
	Message string // the same whether or not the address has an account
}

// ResetConfirmView is the page a reset link opens.
type ResetConfirmView struct {
	Token string // the link's, checked for shape (models.LinkTokenShaped)
}

// VerifyView is the page a confirmation link opens.
type VerifyView struct {
	Token string // the link's, checked for shape
}

// NoticeView is a page of one message and a way on.
type NoticeView struct {
	Heading, Message  string
	LinkURL, LinkText string // "" for none
}
