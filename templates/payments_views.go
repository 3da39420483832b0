package templates

// PaymentsView is the payments page: topping up the prepaid balance
// through Stripe Checkout, the auto-recharge, and paid tiers as
// subscriptions with Stripe's customer portal.
type PaymentsView struct {
	// Enabled is false while the operator has not configured Stripe: the
	// page says so and offers nothing.
	Enabled  bool
	CanEdit  bool   // owners pay; members see the state only
	Currency string // e.g. "USD"
	Min, Max string // top-up bounds, e.g. "5.00"
	// Checkout is set right after a form made a Checkout session: the link
	// to Stripe's page, with what it will charge.
	Checkout *CheckoutLink
	// Returned is the page Stripe sent the owner back to: nothing changes
	// until Stripe's event arrives.
	Returned     string // "success" | "cancel" | ""
	Subscription SubscriptionView
	Recharge     RechargeView
	Notice       FormNotice
	TopUpInput   string // refills the amount after a refusal
	TopUps       []TopUpRow
}

// TopUpRow is one top-up and where it stands.
type TopUpRow struct {
	SessionID string
	Started   string
	Amount    string // "25.01 USD"
	State     string // waiting | paid | credited
}

// CheckoutLink is a Checkout session to open.
type CheckoutLink struct {
	URL     string
	What    string // "a top-up of 25.00 USD", "the pro tier"
	Charged string // "25.00 USD", rounded half-up to the cent; "" for a subscription (Stripe shows its price)
}

// SubscriptionView is the organization's paid tier.
type SubscriptionView struct {
	TierName  string // the tier the organization is on
	Status    string // Stripe's status; "" for none
	GraceEnds string // formatted; "" while no grace period runs
	Reason    string // why the grace period runs
	HasPortal bool   // a Stripe customer exists: the portal can open
	PaidTiers []PaidTier
}

// PaidTier is a tier sold as a subscription.
type PaidTier struct {
	Name    string
	Summary string
	Current bool
}

// RechargeView is the auto-recharge's setting and last failure.
type RechargeView struct {
	On        bool
	Threshold string
	Amount    string
	Error     string // the last failure, until a recharge succeeds
	FailedAt  string
	CanSet    bool // a card was saved by a first top-up
}

// Forms of the payments page.
const (
	FormTopUp     = "top-up"
	FormSubscribe = "subscribe"
	FormRecharge  = "auto-recharge"
)

// topUpState is a top-up's state in words.
func topUpState(state string) string {
	switch state {
	case "waiting":
		return "waiting for Stripe's confirmation"
	case "paid":
		return "paid; being credited"
	}
	return state
}

// paymentLabel is an invoice's payment state in words.
func paymentLabel(state string) string {
	switch state {
	case "open":
		return "charging"
	case "failed":
		return "payment failed"
	}
	return state
}

// paymentClass colours an invoice's payment state.
func paymentClass(state string) string {
	switch state {
	case "paid":
		return "badge-active"
	case "failed":
		return "badge-revoked"
	}
	return "badge-neutral"
}
