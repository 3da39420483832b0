// Package accounts is the account logic shared by the JSON API and the
// browser: signup, login with throttling, sessions, API tokens, and the
// cached token lookup of the gateway's hot path.
package accounts

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
)

// Service signs users up and in.
type Service struct {
	store      *models.Store
	dir        *Directory
	bus        cluster.Bus
	throttle   *LoginThrottle
	signups    *SignupThrottle // nil: signups are not throttled
	ledger     Balances        // budgets; nil: no token's balance is brought up to date
	ledgerLog  *slog.Logger
	mail       *Mailing // nil: Sluice sends no mail
	bcryptCost int
	dummyHash  []byte // compared against for unknown emails, so timing does not reveal them
	// deletedOrgRetention is how long a deleted organization's data stays
	// for export.
	deletedOrgRetention time.Duration
}

// ServiceOption adjusts a Service.
type ServiceOption func(*Service)

// WithSignupThrottle bounds signups per client address; without it (or
// with a nil throttle) they are not bounded.
func WithSignupThrottle(t *SignupThrottle) ServiceOption {
	return func(s *Service) { s.signups = t }
}

// Balances is what the service needs of the budget ledger
// (metering.Ledger): a token's balance brought up to what the store has
// billed it.
type Balances interface {
	Resync(ctx context.Context, a models.LedgerAccount, period time.Time) error
}

// WithLedger has a token given a monthly budget brought up to date in
// ledger (see UpdateToken); a failure to is logged to log.
func WithLedger(ledger Balances, log *slog.Logger) ServiceOption {
	return func(s *Service) { s.ledger, s.ledgerLog = ledger, log }
}

// NewService returns the account service. bcryptCost is 12 in production.
// Changes the gateway caches (revocations, tiers, freezes) are applied to
// dir at once and published on bus for the other nodes.
func NewService(store *models.Store, dir *Directory, bus cluster.Bus, throttle *LoginThrottle, bcryptCost int, opts ...ServiceOption) (*Service, error) {
	dummy, err := bcrypt.GenerateFromPassword([]byte("not a real password"), bcryptCost)
	if err != nil {
		return nil, apperr.Wrap(err, "bcrypt")
	}
	s := &Service{store: store, dir: dir, bus: bus, throttle: throttle, bcryptCost: bcryptCost, dummyHash: dummy,
		deletedOrgRetention: DefaultDeletedOrgRetention}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// ValidatePassword enforces bcrypt's real limits: below 8 bytes is weak,
// above 72 bytes bcrypt would silently ignore the rest.
func ValidatePassword(p string) error {
	switch {
	case len(p) < 8:
		return apperr.New(apperr.Unprocessable, "password must be at least 8 bytes")
	case len(p) > 72:
		return apperr.New(apperr.Unprocessable, "password must be at most 72 bytes (%d given)", len(p))
	}
	return nil
}

// ValidateEmail accepts a bare address such as ada@example.com.
func ValidateEmail(email string) error {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != strings.TrimSpace(email) || len(email) > 254 {
		return apperr.New(apperr.Unprocessable, "email must be an address like ada@example.com")
	}
	return nil
}

func validateOrgName(name string) error {
	if n := utf8.RuneCountInString(strings.TrimSpace(name)); n < 1 || n > 100 {
		return apperr.New(apperr.Unprocessable, "organization name must be 1 to 100 characters")
	}
	return nil
}

// Signup creates an organization on the free tier with the user as owner,
// and returns them acting in it. Signups from one client address are
// throttled (SignupThrottle).
func (s *Service) Signup(ctx context.Context, email, password, orgName, clientIP string) (models.Member, models.Organization, error) {
	if err := checkCredentials(email, password); err != nil {
		return models.Member{}, models.Organization{}, err
	}
	if err := validateOrgName(orgName); err != nil {
		return models.Member{}, models.Organization{}, err
	}
	return s.signup(ctx, email, password, clientIP, func(hash string) (models.Organization, models.Member, error) {
		return s.store.CreateOrganizationWithOwner(ctx, strings.TrimSpace(orgName), "free", strings.TrimSpace(email), hash, models.RoleMember)
	})
}

// SignupByInvitation creates an account through an invitation: the user
// joins the invitation's organization with its role instead of creating
// one, and the code is used up. The email must be the one invited.
func (s *Service) SignupByInvitation(ctx context.Context, email, password, code, clientIP string) (models.Member, models.Organization, error) {
	if err := checkCredentials(email, password); err != nil {
		return models.Member{}, models.Organization{}, err
	}
	// Checked before the throttle and the hash, so a stale link costs
	// neither; the transaction below checks again as it uses the code.
	inv, err := s.store.InvitationByCode(ctx, code)
	if err != nil {
		return models.Member{}, models.Organization{}, err
	}
	if err := inv.Usable(s.store.Now(), email); err != nil {
		return models.Member{}, models.Organization{}, err
	}
	return s.signup(ctx, email, password, clientIP, func(hash string) (models.Organization, models.Member, error) {
		return s.store.CreateInvitedUser(ctx, code, strings.TrimSpace(email), hash)
	})
}

// checkCredentials checks a signup's email and password.
func checkCredentials(email, password string) error {
	if err := ValidateEmail(strings.TrimSpace(email)); err != nil {
		return err
	}
	return ValidatePassword(password)
}

// signup throttles, hashes the password and creates the account with
// create.
func (s *Service) signup(ctx context.Context, email, password, clientIP string,
	create func(hash string) (models.Organization, models.Member, error)) (models.Member, models.Organization, error) {
	if err := checkCredentials(email, password); err != nil {
		return models.Member{}, models.Organization{}, err
	}
	// The throttle counts every signup that passed the checks above,
	// whatever becomes of it: one refused because the email is taken
	// counts too (it cost a bcrypt hash and tells whether the address has
	// an account), so varying the email, or probing emails, gains nothing.
	// A signup refused by those checks does not count: it makes nothing,
	// costs no hash, and a person fixing a typo is not locked out for it.
	// One that fails on our side (the database unreachable) is given back.
	giveBack, err := s.signups.take(ctx, clientIP)
	if err != nil {
		return models.Member{}, models.Organization{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.bcryptCost)
	if err != nil {
		giveBack()
		return models.Member{}, models.Organization{}, apperr.Wrap(err, "hash password")
	}
	o, m, err := create(string(hash))
	if err != nil && apperr.Status(apperr.CodeOf(err)) >= 500 {
		giveBack()
	}
	return m, o, err
}

// Login checks a password and returns the user acting where their sign-in
// starts (Store.StartingMember). Every attempt is charged to its email's
// and its address's buckets first (LoginThrottle); a locked one is not
// checked at all and costs no hash (its 429 says it was locked whatever
// the password or the email, so there is no timing to hide, and a flood
// of locked attempts must not cost a bcrypt hash each). A disabled user
// is told so only once their password is right.
func (s *Service) Login(ctx context.Context, email, password, clientIP string) (models.Member, error) {
	attempt, err := s.throttle.reserve(ctx, email, clientIP)
	if apperr.CodeOf(err) == apperr.RateLimited {
		return models.Member{}, err
	}
	if err != nil {
		return models.Member{}, err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if err != nil && apperr.CodeOf(err) != apperr.NotFound {
		return models.Member{}, err
	}
	if err == nil && !u.HasPassword() {
		// Made by single sign-on: there is no password to guess, so this
		// costs no attempt, and saying so is what helps them sign in.
		attempt.refund(ctx)
		return models.Member{}, apperr.WithReason(apperr.Unauthorized, "sso_account",
			"this account signs in with SSO: use “Sign in with SSO” instead of a password")
	}
	hash := s.dummyHash
	if err == nil {
		hash = []byte(u.PasswordHash)
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || err != nil {
		// The charge stays: it is this failure.
		return models.Member{}, apperr.WithReason(apperr.Unauthorized, "invalid_credentials", "email or password is wrong")
	}
	attempt.succeeded(ctx)
	if u.Disabled() {
		return models.Member{}, errAccountDisabled
	}
	if err := s.store.RecordLogin(ctx, u.ID, s.store.Now()); err != nil {
		return models.Member{}, err
	}
	return s.store.StartingMember(ctx, u)
}

// EnsureAdmin creates the first admin account when there is none. With an
// empty password it generates one and returns it so it can be shown once.
func (s *Service) EnsureAdmin(ctx context.Context, email, password string) (created bool, shownPassword string, err error) {
	exists, err := s.store.AdminExists(ctx)
	if err != nil || exists {
		return false, "", err
	}
	if password == "" {
		password = rand.Text()
		shownPassword = password
	}
	if err := ValidatePassword(password); err != nil {
		return false, "", err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.bcryptCost)
	if err != nil {
		return false, "", apperr.Wrap(err, "hash password")
	}
	_, _, err = s.store.CreateOrganizationWithOwner(ctx, "Sluice operators", "premium", email, string(hash), models.RoleAdmin)
	if err != nil {
		return false, "", err
	}
	return true, shownPassword, nil
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return itoa(n) + " " + unit + "s"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
