package mail

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Message is one mail to queue: what it is about (a Kind…), to whom, and
// its plain text.
type Message struct {
	Kind    string
	To      string
	Subject string
	Text    string
}

// The kinds of mail Sluice sends.
const (
	KindInvitation    = "invitation"
	KindPasswordReset = "password_reset"
	KindVerification  = "email_verification"
	KindSignup        = "signup"       // confirm a new account's address
	KindSignupTaken   = "signup_taken" // someone signed up with an address that has an account
	KindBudgetAlert   = "budget_alert"
	KindLowBalance    = "low_balance"
	KindPaymentFailed = "payment_failed"
)

// Composer writes Sluice's mails, plain text, with links under the
// public URL (SLUICE_PUBLIC_URL): never under a request's Host header,
// which whoever asks for a reset chooses.
type Composer struct {
	base string // the public URL, without a trailing slash
}

// NewComposer returns a composer of links under publicURL
// (https://sluice.example.com).
func NewComposer(publicURL string) Composer {
	return Composer{base: strings.TrimRight(publicURL, "/")}
}

// Link is the public URL of path (/password-reset/lnk_…).
func (c Composer) Link(path string) string { return c.base + path }

// PasswordResetLink is where a reset token is used.
func (c Composer) PasswordResetLink(token string) string {
	return c.Link("/password-reset/" + url.PathEscape(token))
}

// VerifyLink is where an email confirmation token is used.
func (c Composer) VerifyLink(token string) string {
	return c.Link("/verify-email/" + url.PathEscape(token))
}

// InvitationLink is an invitation's page.
func (c Composer) InvitationLink(code string) string {
	return c.Link("/invitations/" + url.PathEscape(code))
}

const signature = "\n-- \nSluice · " // followed by the public URL

func (c Composer) mail(kind, to, subject, body string) Message {
	return Message{Kind: kind, To: to, Subject: oneLine(subject), Text: body + signature + c.base + "\n"}
}

// PasswordReset is the mail of a password reset link, which works once,
// for an hour.
func (c Composer) PasswordReset(to, token string) Message {
	return c.mail(KindPasswordReset, to, "Reset your Sluice password", fmt.Sprintf(`Someone (we hope you) asked to reset the password of the Sluice account %s.

Choose a new password here:

%s

The link works once, for an hour. Using it signs you out everywhere.
If you did not ask for it, ignore this mail: your password stays as it is.
`, to, c.PasswordResetLink(token)))
}

// Verification asks an existing user to confirm their address.
func (c Composer) Verification(to, token string) Message {
	return c.mail(KindVerification, to, "Confirm your email address for Sluice", fmt.Sprintf(`Please confirm that %s is your address:

%s

The link works once, for 24 hours. Confirming it unlocks your plan's
included credit where the plan asks for a confirmed address.
`, to, c.VerifyLink(token)))
}

// SignupConfirm finishes a signup: the account is made when the link is
// opened.
func (c Composer) SignupConfirm(to, orgName, token string) Message {
	return c.mail(KindSignup, to, "Confirm your Sluice account", fmt.Sprintf(`Welcome to Sluice.

To finish creating your account %s and the organization %q, confirm your
address here:

%s

The link works once, for 24 hours. If you did not sign up, ignore this
mail: no account is made.
`, to, oneLine(orgName), c.VerifyLink(token)))
}

// SignupTaken tells the owner of an address that someone signed up with
// it: the signup's answer was the same as for a new address, so only the
// address's owner learns it has an account.
func (c Composer) SignupTaken(to string) Message {
	return c.mail(KindSignupTaken, to, "Someone tried to sign up to Sluice with your address", fmt.Sprintf(`Someone tried to create a Sluice account with %s, which already has one.
Nothing was changed.

If it was you: sign in at %s
Forgot your password? Reset it at %s

If it was not you, you need not do anything.
`, to, c.Link("/login"), c.Link("/password-reset")))
}

// Invitation asks to into an organization.
func (c Composer) Invitation(to, orgName, inviter string, role string, code string, expires time.Time) Message {
	from := "An owner"
	if inviter != "" {
		from = inviter
	}
	return c.mail(KindInvitation, to, "You are invited to "+oneLine(orgName)+" on Sluice", fmt.Sprintf(`%s invited you to join the organization %q on Sluice, as %s.

Accept the invitation here (sign in, or make an account with this address):

%s

The invitation works once, until %s.
`, from, oneLine(orgName), role, c.InvitationLink(code), expires.UTC().Format("2006-01-02 15:04 UTC")))
}

// BudgetAlert tells an owner their organization's spending crossed
// percent of its monthly budget.
func (c Composer) BudgetAlert(to, orgName string, percent int, spent, limit string, period time.Time) Message {
	return c.mail(KindBudgetAlert, to, fmt.Sprintf("%s has spent %d%% of its monthly budget", oneLine(orgName), percent), fmt.Sprintf(`The organization %q has spent $%s of its $%s monthly budget for %s (%d%%).

See the spending and change the budget at %s
`, oneLine(orgName), spent, limit, period.UTC().Format("January 2006"), percent, c.Link("/dashboard")))
}

// LowBalance tells an owner that the organization's prepaid balance fell
// to balance, at or below the alert they set at threshold.
func (c Composer) LowBalance(to, orgName, balance, threshold string) Message {
	return c.mail(KindLowBalance, to, fmt.Sprintf("%s's prepaid balance is low: $%s", oneLine(orgName), balance), fmt.Sprintf(`The organization %q has $%s left of its prepaid balance, at or below the alert you set at $%s. Requests are refused once it is spent.

Top it up, redeem a code or change the alert at %s
`, oneLine(orgName), balance, threshold, c.Link("/dashboard")))
}

// PaymentFailed tells an owner that a payment of the organization failed:
// what happened, as the payments say it.
func (c Composer) PaymentFailed(to, orgName, what string) Message {
	return c.mail(KindPaymentFailed, to, fmt.Sprintf("A payment for %s failed", oneLine(orgName)), fmt.Sprintf(`A payment for the organization %q failed: %s

See it and change the card at %s
`, oneLine(orgName), what, c.Link("/billing/payments")))
}

// oneLine keeps text on one line: a name in a subject must not start a
// header.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
