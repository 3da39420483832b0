package templates

// View models of the dashboard's money side: usage charts, this month's
// spend against the budget, invoices, the owner's billing settings and the
// upgrade request. Every amount arrives as its exact text ("$12.34",
// "$0.000761"); floats appear only inside Chart and Gauge, for drawing.

// BillingView is everything the dashboard shows about usage and money.
type BillingView struct {
	// Balance is the prepaid balance section.
	Balance  BalanceView
	Usage    UsageView
	Spend    SpendView
	Invoices InvoicesView
	Settings SettingsView
	Plan     PlanView
	// Notice is the outcome of the last billing form, shown beside that
	// form rather than at the top of a long page.
	Notice FormNotice
}

// Forms of the billing side, as FormNotice names them; each is also the
// id of the section the form sits in, so a redirect can land on it.
const (
	FormBudget   = "budget"
	FormTimeZone = "time-zone"
	FormWebhook  = "webhook"
	FormUpgrade  = "upgrade"
)

// FormNotice is a success message or an error for one form.
type FormNotice struct {
	Form  string // one of the Form* constants; empty for none
	Flash string // a success message after a redirect
	Error string // why the submitted form was refused
}

// For says what the notice has to say about form, if anything.
func (n FormNotice) For(form string) (flash, err string) {
	if n.Form != form {
		return "", ""
	}
	return n.Flash, n.Error
}

// UsageView is the usage charts with the links that switch them.
type UsageView struct {
	Ranges    []UsageLink // last 30 days, last 48 hours
	Groupings []UsageLink // total, by model, by token
	// Period says what the charts cover, e.g. "Feb 14 – Mar 15, 2027,
	// days in Asia/Shanghai".
	Period string
	// Folded is how many smaller series were folded into "Other".
	Folded                             int
	Requests, Tokens, Rejections, Cost Chart
}

// UsageLink is one choice of a chart switch: a plain link, so it works
// without JavaScript.
type UsageLink struct {
	Label   string
	URL     string // e.g. "/dashboard?range=48h&by=model#usage"
	Current bool
	TestID  string
}

// SpendView is this month's spend against the budget and included credit.
type SpendView struct {
	Gauge    Gauge
	Spent    string // exact, e.g. "$1.234567"
	Reserved string // held for requests in progress; empty when none
	Credit   string // this month's included credit, prorated over the plans in force in it; empty for none
	Budget   string // empty when no budget is set
	HardStop bool
	// Overage is what happens past the included credit: "bill" or "block".
	Overage string
	// Resets is when the month's spending starts again from zero, in the
	// organization's time zone, e.g. "Apr 1, 2027 08:00 Asia/Shanghai".
	Resets string
	// Banner is set once spending reached 50%, 80% or 100% of the budget.
	Banner *BudgetBanner
	// CreditUsedUp says the tier blocks overage and its included credit is
	// spent, so priced requests are refused until Resets.
	CreditUsedUp bool
	TierName     string
	// PlanCredit is the current plan's included credit for a whole month,
	// set only when this month's (Credit) differs: the organization joined,
	// moved or had its plan's terms changed during the month.
	PlanCredit string
	// WithheldCredit is the plan's monthly credit when it waits for an
	// owner's verified email address; empty otherwise. Owner says the
	// visitor is one, whose own verification would release it.
	WithheldCredit string
	Owner          bool
}

// BudgetBanner is the budget alert shown on the dashboard: the highest
// threshold this month's spending has reached.
type BudgetBanner struct {
	Percent  int    // 50, 80 or 100
	Spent    string // e.g. "$8.12"
	Budget   string // e.g. "$10.00"
	HardStop bool
	Resets   string
}

// InvoicesView is the current month's live draft and the past invoices.
type InvoicesView struct {
	Draft *InvoiceView // nil until the first invoice exists
	Past  []InvoiceRow // newest first
}

// InvoiceView is one invoice with its lines.
type InvoiceView struct {
	ID     int64
	Period string // e.g. "March 2027"
	Status string // draft | final
	Total  string // e.g. "$12.35"
	CSVURL string
	Lines  []InvoiceLineRow
}

// InvoiceLineRow is one line of an invoice. Token counts and unit prices
// are set on usage lines only.
type InvoiceLineRow struct {
	Kind        string // fee | usage | credit
	Description string
	Model       string
	Requests    int64
	Input       int64  // prompt tokens
	Output      int64  // completion tokens
	Cached      int64  // cached prompt tokens, part of Input
	InputPrice  string // per million tokens, e.g. "$0.50"; empty when not billed
	OutputPrice string
	CachedPrice string
	Amount      string // rounded to the cent, e.g. "-$1.00"
}

// InvoiceRow is a past invoice in the list.
type InvoiceRow struct {
	ID     int64
	Period string
	Status string
	Total  string
	CSVURL string
	// Payment is Stripe's state of a charged invoice (open, paid, failed,
	// void), "" when not charged; HostedURL its page at Stripe.
	Payment   string
	HostedURL string
}

// SettingsView is the organization's billing settings. Only owners and
// admins may change them; members see them read-only.
type SettingsView struct {
	CanEdit  bool
	Budget   BudgetForm
	TimeZone string // the zone days are counted in, e.g. "UTC"
	// TimeZoneInput refills the time zone field after a failed attempt.
	TimeZoneInput string
	WebhookURL    string // the current one; empty when alerts by webhook are off
	// WebhookInput refills the webhook field after a failed attempt.
	WebhookInput string
	// WebhookSecret is the signing secret of a webhook just saved, shown
	// this once.
	WebhookSecret string
}

// BudgetForm is the budget as its form shows it.
type BudgetForm struct {
	MonthlyLimit string // a decimal string of dollars such as "10.00"; empty: no budget
	HardStop     bool
}

// PlanView is the tier's plan and the way to ask for another tier.
type PlanView struct {
	TierName string
	Fee      string // a month, e.g. "$49.00"
	Credit   string // included each month
	Overage  string // bill | block
	Tiers    []TierOption
	Pending  *UpgradeRow // shown instead of the form while set
	Last     *UpgradeRow // the latest decided request, if any
	Form     UpgradeForm
	// ReadOnly leaves the form out: only owners request upgrades.
	ReadOnly bool
	// GraceEnds is when a paid tier's grace period ends (after a failed
	// payment or the subscription's end), with why; "" while none runs.
	GraceEnds, GraceReason string
	// PaidTiers are sold as subscriptions on the payments page, not by
	// request; PaymentsOff says Stripe is not configured.
	PaidTiers   []string
	PaymentsOff bool
}

// TierOption is a tier one may ask to move to.
type TierOption struct {
	Name    string
	Summary string // e.g. "$49.00 a month, $10.00 included credit, burst of 200 requests, refills 5 per second"
}

// UpgradeRow is one upgrade request.
type UpgradeRow struct {
	FromTier  string
	ToTier    string
	Note      string
	Status    string // pending | approved | declined
	Requested string // formatted time
	Decided   string // formatted time; empty while pending
}

// UpgradeForm refills the upgrade form after a failed attempt.
type UpgradeForm struct {
	Tier string
	Note string
}

// timeZoneSuggestions are offered by the time zone field; any IANA zone
// is accepted.
var timeZoneSuggestions = []string{
	"UTC", "America/Los_Angeles", "America/Denver", "America/Chicago", "America/New_York", "America/Sao_Paulo",
	"Europe/London", "Europe/Paris", "Europe/Berlin", "Europe/Moscow", "Africa/Lagos", "Africa/Johannesburg",
	"Asia/Dubai", "Asia/Kolkata", "Asia/Singapore", "Asia/Shanghai", "Asia/Tokyo", "Australia/Sydney", "Pacific/Auckland",
}

// bannerClass colours a budget banner by how much is spent.
func bannerClass(percent int) string {
	switch {
	case percent >= 100:
		return "notice-error"
	case percent >= 80:
		return "notice-warning"
	default:
		return "notice-info"
	}
}

// bannerRole makes a reached budget an alert; lesser news is a status.
func bannerRole(percent int) string {
	if percent >= 100 {
		return "alert"
	}
	return "status"
}

// invoiceStatusClass colours an invoice's status badge.
func invoiceStatusClass(status string) string {
	if status == "final" {
		return "badge-freeze-expired"
	}
	return "badge-warning"
}

// dollarsOrEmpty writes a decimal string of dollars as "$10.00"; empty
// stays empty.
func dollarsOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return "$" + s
}

// yesNo writes a setting that is on or off.
func yesNo(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
