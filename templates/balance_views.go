package templates

// The prepaid balance section of the dashboard (balance.templ).

// Forms of the balance section, as FormNotice names them; each is also the
// id of the part the form sits in.
const (
	FormRedeem     = "redeem"
	FormLowBalance = "low-balance"
)

// BalanceView is an organization's prepaid balance on the dashboard.
type BalanceView struct {
	// Prepaid says the tier spends from the balance; otherwise the
	// organization is invoiced and the balance waits.
	Prepaid  bool
	TierName string
	// Balance, Reserved and Available are exact dollars ("$4.999791").
	Balance, Reserved, Available string
	// Empty says a prepaid organization has nothing left to spend: its
	// requests to priced models are refused.
	Empty bool
	// Low says the low-balance alert went out (the balance is at or below
	// Threshold and has not been back above it since).
	Low bool
	// Threshold is the owner's low-balance alert, "" for none;
	// ThresholdInput refills the form after a refusal.
	Threshold, ThresholdInput string
	// ThresholdAmount is Threshold as the form takes it ("4.99").
	ThresholdAmount string
	// CanEdit says the visitor may set the alert (an owner).
	CanEdit bool
	// PaymentsOff, when set, says why there is no top-up by card.
	PaymentsOff string
	// Spending is the spending of the last days, a bar per day.
	Spending Chart
	// History is the latest credits, adjustments and days of spending,
	// newest first.
	History     []BalanceHistoryRow
	RedeemInput string
}

// BalanceHistoryRow is one line of the balance's history.
type BalanceHistoryRow struct {
	When   string
	Kind   string // "Top-up", "Redeem code", "Adjustment", "Refund", "Spending"
	Amount string // signed: "+$5.00", "-$0.42"
	Note   string
	Credit bool // positive
}
