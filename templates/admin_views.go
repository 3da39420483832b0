package templates

import (
	"fmt"
	"net/url"

	"github.com/a-h/templ"
)

// View models of the admin console. Every value is already the text the
// page shows (amounts as exact decimal strings, times formatted) and every
// link is built by the handler, so the components only lay them out.

// Admin sections, for the admin navigation to mark the current page.
const (
	AdminSectionOrganizations = "organizations"
	AdminSectionTiers         = "tiers"
	AdminSectionPrices        = "prices"
	AdminSectionAudit         = "audit"
	AdminSectionUsers         = "users"
)

// AdminTiersView is the admin page for tiers: their limits and plans, the
// freezes of every organization and the auto-tuner.
type AdminTiersView struct {
	Tiers   []TierRow
	Freezes []FreezeRow  // latest freezes of every organization
	Tuning  []TuningRow  // the auto-tuner's latest changes
	Limiter LimiterState // where bucket state lives right now
	NewTier AdminTierForm
}

// LimiterState describes the rate limiter's backend for admins.
type LimiterState struct {
	Mode     string // "local" (one node, in memory), "shared" (Redis) or "degraded" (Redis unreachable: local at a per-node share)
	Nodes    int    // the nodes sharing the limits: SLUICE_EXPECTED_NODES or, when more, those seen lately
	Degraded bool
}

// TuningRow is one auto-tuner change.
type TuningRow struct {
	At   string
	Tier string
	From string // refill per second before, e.g. "0.5"
	To   string
	Load string // e.g. "0.92"
}

// TierRow is one tier with its editable limits and plan.
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
	MonthlyFee       string // dollars, e.g. "49.00"
	IncludedCredit   string // dollars of usage the fee covers each month
	Overage          string // "bill" or "block"
	Billing          string // "invoice" or "prepaid"
	BillCacheHits    bool
	BatchFileMiB     string // the largest batch file, in MiB, e.g. "1" or "0.5"
	MaxAPITokens     int    // active API tokens an organization may hold; 0: no limit
	// MaxQueuedJobs and MaxPendingBatchLines bound an organization's
	// queued jobs and pending batch lines; 0 refuses them.
	MaxQueuedJobs        int64
	MaxPendingBatchLines int64
	// CreditNeedsVerifiedEmail withholds the included credit until an
	// owner's email is verified.
	CreditNeedsVerifiedEmail bool
	StripePriceID            string // "" for none
	GraceDays                int
	Organizations            int64  // on this tier; a tier in use cannot be deleted
	TermsFrom                string // when the fee, credit and overage took effect, e.g. "2026-11-16 09:30 UTC"; empty: since before terms were dated
}

// AdminTierForm refills the create-a-tier form after a failed attempt.
type AdminTierForm struct {
	Name                 string
	Capacity             string
	RefillPerSec         string
	TokensPerMinute      string
	FreezeThreshold      string
	FreezeMinutes        string
	RefillFloor          string
	UpstreamFallback     string
	Autotune             bool
	MonthlyFee           string
	IncludedCredit       string
	Overage              string
	Billing              string
	BillCacheHits        bool
	BatchFileMiB         string
	MaxAPITokens         string
	MaxQueuedJobs        string
	MaxPendingBatchLines string
	// CreditNeedsVerifiedEmail: no included credit until an owner's email
	// is verified.
	CreditNeedsVerifiedEmail bool
	StripePriceID            string
	GraceDays                string
}

// AdminOverviewView is the overview of every organization: one page of
// them, searched and sorted, and the upgrade requests waiting.
type AdminOverviewView struct {
	Search   string
	Sort     string // the column sorted by
	Desc     bool
	Period   string // the month shown, e.g. "March 2027"
	Columns  []AdminSortColumn
	Rows     []AdminOrgRow
	Total    int64 // organizations matching the search
	Page     int
	Pages    int
	PrevURL  string // "" on the first page
	NextURL  string // "" on the last
	ClearURL string // the overview without a search; "" when there is none
	Upgrades []AdminUpgradeRow
	// UpgradesTotal counts every pending request; Upgrades holds the
	// oldest of them.
	UpgradesTotal int64
	// Queue is the job queue's depth; nil when there is no queue.
	Queue *AdminQueueView
}

// AdminSortColumn is one column head of the overview: a link that sorts
// by it, ascending first, or flips its direction when it is the sorted one.
type AdminSortColumn struct {
	Key     string
	Label   string
	Numeric bool   // right-aligned
	URL     string // sorts by this column
	Sorted  string // "ascending", "descending" or "" (aria-sort's values)
}

// AdminOrgRow is one organization on the overview.
type AdminOrgRow struct {
	ID            int64
	URL           string // its page
	Name          string
	OwnerEmail    string
	Tier          string
	Spend         string // exact, e.g. "$12.345678"
	Requests      string // e.g. "12,345"
	RejectionRate string // e.g. "4.2%"; "—" without requests
	Freezes       int64
	Created       string
}

// AdminUpgradeRow is a pending upgrade request with its decision forms.
type AdminUpgradeRow struct {
	ID         int64
	OrgName    string
	OrgURL     string
	Requester  string // email
	From, To   string // tiers
	Note       string
	Requested  string // when
	ApproveURL string
	DeclineURL string
}

// AdminOrgView is one organization's admin page.
type AdminOrgView struct {
	ID            int64
	Name          string
	Tier          string
	TierNames     []string // for the tier change form
	TierURL       string   // where the tier form posts
	Created       string
	TimeZone      string
	Period        string // this month, e.g. "March 2027"
	Spend         string // this month, exact
	Requests      string
	Rejected      string
	RejectionRate string
	ActiveFreezes int64
	Requests30d   Chart // requests and rejections per day, 30 days
	Cost30d       Chart // cost per day, 30 days
	Budget        AdminBudget
	Invoices      []AdminInvoiceRow
	Tokens        []TokenRow
	Users         []AdminUserRow
	Upgrade       *AdminUpgradeRow // its pending request; nil for none
	AuditURL      string           // the audit log filtered to it
	// ExportURL downloads its invoices and usage (a zip); "" once purged.
	ExportURL string
	// DeleteURL is where the delete form posts; "" once deleted.
	DeleteURL    string
	ActiveTokens int    // what deleting it stops
	PurgeIn      string // how long after deletion its data is purged, e.g. "30 days"
	// Deleted says when it was deleted and when its data goes (or went):
	// "" while it is live.
	Deleted string
	Balance AdminBalance
}

// AdminBalance is an organization's prepaid balance for the admin, and the
// adjust form (refilled after a refusal, with its Error).
type AdminBalance struct {
	Billing                  string // the tier's: "invoice" or "prepaid"
	Balance, Reserved        string
	AdjustURL                string
	AmountInput, ReasonInput string
	Error                    string
}

// AdminRedeemCodesView is the admin's redeem codes: the create form, a new
// code shown once, and every code.
type AdminRedeemCodesView struct {
	NewCode string // the plain code just made, shown this once
	Form    AdminRedeemForm
	Codes   []AdminRedeemRow
}

// AdminRedeemForm refills the create form after a refusal.
type AdminRedeemForm struct {
	Amount, Uses, ExpiresAt, Note string
}

// AdminRedeemRow is one redeem code as admins see it (never the code).
type AdminRedeemRow struct {
	Prefix, Amount, Uses, Expires, Note, Created string
	Spent                                        bool // used up or expired
}

// AdminBudget is an organization's budget state for the admin.
type AdminBudget struct {
	Gauge    Gauge
	Limit    string // "none" without a budget
	HardStop bool
	Reserved string // reserved by requests in flight
	Credit   string // the tier's included credit
	Overage  string // bill or block
	Alerts   string // thresholds crossed this month, e.g. "50%, 80%"; "" for none
}

// AdminInvoiceRow is one invoice in an organization's list.
type AdminInvoiceRow struct {
	ID     int64
	Period string // e.g. "March 2027"
	Status string // draft | final
	Total  string // e.g. "$59.00"
	URL    string
	CSVURL string
}

// AdminUserRow is one user of an organization; never more than this.
type AdminUserRow struct {
	Email   string
	Role    string
	Created string
}

// AdminInvoiceView is one invoice with its lines, as the admin sees it.
type AdminInvoiceView struct {
	OrgName  string
	OrgURL   string
	Period   string
	Status   string
	Currency string
	Total    string
	CSVURL   string
	Lines    []AdminInvoiceLine
}

// AdminInvoiceLine is one line of an invoice.
type AdminInvoiceLine struct {
	Kind        string // fee | usage | credit
	Description string
	Requests    string // usage lines only, else ""
	Tokens      string // e.g. "1,000 in (200 cached) · 500 out"
	Prices      string // per million tokens, e.g. "$0.50 / $1.50 / $0.25"
	Amount      string
}

// AdminPricesView is the prices page: every model's current price, the
// unpriced ones flagged, and the set-a-price form.
type AdminPricesView struct {
	Rows     []AdminPriceRow
	Unpriced int      // models served or metered without a price
	Models   []string // every model known, for the form's suggestions
	Form     AdminPriceForm
}

// AdminPriceRow is one model's current price, or its lack of one.
type AdminPriceRow struct {
	Model         string
	Priced        bool
	Input         string // dollars per million tokens
	Output        string
	CachedInput   string
	CacheCreation string // "" when it is the input price
	Reasoning     string // "" when it is the output price
	EffectiveFrom string
	Versions      int    // prices it has had, current included
	EditURL       string // the prices page with the form filled for this model
}

// AdminPriceForm refills the set-a-price form.
type AdminPriceForm struct {
	Model         string
	Input         string
	Output        string
	CachedInput   string
	CacheCreation string
	Reasoning     string
}

// AdminAuditView is a page of the audit log with its filters.
type AdminAuditView struct {
	Filter   AdminAuditFilter
	Rows     []AdminAuditRow
	Page     int
	PrevURL  string   // newer entries; "" on the first page
	NextURL  string   // older entries; "" when there are none
	ClearURL string   // "" when no filter is set
	Actions  []string // common prefixes, for the filter's suggestions
}

// AdminAuditFilter refills the audit log's filter form.
type AdminAuditFilter struct {
	OrgID  string
	Action string
	From   string // YYYY-MM-DD, UTC
	To     string // YYYY-MM-DD, UTC, included
}

// AdminAuditRow is one audit entry.
type AdminAuditRow struct {
	At      string
	OrgName string // "" when the entry has no organization
	OrgURL  string
	Actor   string // email, or "system"
	Action  string
	Target  string
	Detail  string
}

// tierDeleteURL is where a tier's delete form posts.
func tierDeleteURL(name string) templ.SafeURL {
	return templ.URL("/admin/tiers/" + url.PathEscape(name) + "/delete")
}

// adminLinks are the admin navigation's pages, in order.
var adminLinks = []struct{ Section, Label, Href string }{
	{AdminSectionOrganizations, "Organizations", "/admin/organizations"},
	{AdminSectionUsers, "Users", "/admin/users"},
	{AdminSectionTiers, "Tiers", "/admin/tiers"},
	{AdminSectionPrices, "Prices", "/admin/prices"},
	{AdminSectionAudit, "Audit log", "/admin/audit"},
	{AdminSectionAliases, "Aliases", "/admin/aliases"},
	{"upstreams", "Upstreams", "/admin/upstreams"},
	{AdminSectionRedeemCodes, "Redeem codes", "/admin/redeem-codes"},
}

// AdminSectionRedeemCodes is the redeem codes page's place in the navigation.
const AdminSectionRedeemCodes = "redeem-codes"

// adminAriaCurrent marks the current page's link.
func adminAriaCurrent(current bool) string {
	if current {
		return "page"
	}
	return "false"
}

// adminInvoiceClass colours an invoice's status: a draft still changes.
func adminInvoiceClass(status string) string {
	if status == "final" {
		return "badge-active"
	}
	return "badge-expired"
}

// adminWaiting says how many upgrade requests wait, and how many of them
// are shown when not all are.
func adminWaiting(shown int, total int64) string {
	s := "1 request waits for a decision"
	if total != 1 {
		s = fmt.Sprintf("%d requests wait for a decision", total)
	}
	if int64(shown) < total {
		s += fmt.Sprintf("; the oldest %d are shown", shown)
	}
	return s + "."
}

// AdminUsersView is the admin's list of users: a search by email and a
// page of users, with the next page's link.
type AdminUsersView struct {
	Search   string
	Rows     []AdminUserListRow
	NextURL  string // "" on the last page
	FirstURL string // "" on the first page
	Label    string // e.g. "12 users shown"
	// Reset is the one-time password reset link an admin just made for a
	// user, shown this once, on a Sluice that sends no mail.
	Reset *AdminUserReset
}

// AdminUserReset is a reset link for the admin to pass on.
type AdminUserReset struct {
	Email, URL string
}

// AdminUserListRow is one user of the admin's list.
type AdminUserListRow struct {
	ID         int64
	Email      string
	Admin      bool
	You        bool   // the admin looking: they cannot disable themselves
	Disabled   string // "disabled 3 Mar 2027, 10:04"; "" when enabled
	LastSignIn string // "never" for none recorded
	Created    string
	Orgs       []AdminUserOrgCell
	DisableURL string
	EnableURL  string
	ResetURL   string // where "Send reset" posts
}

// AdminUserOrgCell is one of a user's organizations, linked.
type AdminUserOrgCell struct {
	Name, Role, URL string
}
