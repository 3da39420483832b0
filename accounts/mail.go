package accounts

import (
	"context"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/models"
)

// Mailing is how the service sends mail: what the mails say, with links
// under the public URL, and how to wake this node's outbox worker once one
// is queued (nil: it finds it on its next poll).
type Mailing struct {
	Composer mail.Composer
	Nudge    func()
}

// WithMail has the service mail invitations, password resets and
// verification links (queued in the outbox, in the transaction of what
// causes them). Without it Sluice sends no mail: invitation links are
// shown to the owner, resets are made by an admin, addresses go
// unverified.
func WithMail(m Mailing) ServiceOption {
	return func(s *Service) { s.mail = &m }
}

// MailOn says whether Sluice sends mail.
func (s *Service) MailOn() bool { return s.mail != nil }

// queued is the outbox row of m.
func queued(m mail.Message) models.Mail {
	return models.Mail{Kind: m.Kind, ToAddr: m.To, Subject: m.Subject, BodyText: m.Text}
}

func (s *Service) nudge() {
	if s.mail != nil && s.mail.Nudge != nil {
		s.mail.Nudge()
	}
}

func mailOff(what string) error {
	return apperr.WithReason(apperr.Conflict, "mail_not_configured",
		"this Sluice sends no mail (SLUICE_SMTP_URL is not set), so it cannot "+what)
}

// RequestSignup is signup where Sluice sends mail: nothing is made until
// the address is confirmed. A new address gets a link that makes the
// organization and its owner (ConfirmEmail); an address that has an
// account gets a mail saying someone tried to sign up with it. Both take
// the same checks, throttle, bcrypt hash and writes, and both answer nil,
// so the answer tells nobody whether an address has an account.
func (s *Service) RequestSignup(ctx context.Context, email, password, orgName, clientIP string) error {
	if s.mail == nil {
		return mailOff("confirm addresses")
	}
	if err := checkCredentials(email, password); err != nil {
		return err
	}
	if err := validateOrgName(orgName); err != nil {
		return err
	}
	email, orgName = strings.TrimSpace(email), strings.TrimSpace(orgName)
	_, _, err := s.signup(ctx, email, password, clientIP, func(hash string) (models.Organization, models.Member, error) {
		_, err := s.store.UserByEmail(ctx, email)
		switch apperr.CodeOf(err) {
		case apperr.NotFound:
			token := models.NewLinkToken()
			_, err = s.store.CreatePendingSignup(ctx, email, hash, orgName, token, queued(s.mail.Composer.SignupConfirm(email, orgName, token)))
		case "":
			_, err = s.store.EnqueueBoundedMail(ctx, queued(s.mail.Composer.SignupTaken(email)))
		}
		return models.Organization{}, models.Member{}, err
	})
	if err == nil {
		s.nudge()
	}
	return err
}

// ConfirmEmail uses a link from a signup or verification mail: a signup's
// makes its organization and owner, address verified; a verification's
// verifies its user's address, which gives the organizations they own the
// included credit that waited for it, on every node at once.
func (s *Service) ConfirmEmail(ctx context.Context, token string) (models.Confirmation, error) {
	c, err := s.store.ConfirmEmail(ctx, token)
	if err != nil || c.Created {
		return c, err
	}
	owned, err := s.store.OwnedOrganizationIDs(ctx, c.Member.ID)
	if err != nil {
		return c, err
	}
	for _, id := range owned {
		s.dir.ForgetOrganization(id)
		s.publish(ctx, cluster.Event{Kind: cluster.OrgChanged, ID: id})
	}
	return c, nil
}

// SendVerification mails u a link that verifies their address. Refused
// without mail, for an address already verified, and past
// models.MailsPerAddressHour links an hour.
func (s *Service) SendVerification(ctx context.Context, u models.User) error {
	if s.mail == nil {
		return mailOff("verify addresses")
	}
	fresh, err := s.store.User(ctx, u.ID)
	if err != nil {
		return err
	}
	if fresh.EmailVerifiedAt != nil {
		return apperr.WithReason(apperr.Conflict, "email_already_verified", fresh.Email+" is already verified")
	}
	token := models.NewLinkToken()
	made, err := s.store.CreateVerification(ctx, fresh, token, queued(s.mail.Composer.Verification(fresh.Email, token)))
	if err != nil {
		return err
	}
	if !made {
		return apperr.WithReason(apperr.RateLimited, "verification_throttled",
			"three verification links went to "+fresh.Email+" in the last hour; use the latest, or try again in an hour")
	}
	s.nudge()
	return nil
}

// RequestPasswordReset mails a reset link, which works once for an hour,
// to the account of email, if there is one: the answer is the same either
// way (nil), so it tells nobody whether an address has an account. At most
// models.MailsPerAddressHour links go to one address an hour; past that,
// and without mail, nothing is sent (an admin resets passwords then).
func (s *Service) RequestPasswordReset(ctx context.Context, email string) error {
	email = strings.TrimSpace(email)
	if err := ValidateEmail(email); err != nil {
		return apperr.Field(apperr.Unprocessable, "invalid_email", "email", apperr.As(err).Message)
	}
	if s.mail == nil {
		return nil
	}
	u, err := s.store.UserByEmail(ctx, email)
	if apperr.CodeOf(err) == apperr.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	token := models.NewLinkToken()
	m := queued(s.mail.Composer.PasswordReset(u.Email, token))
	if _, err := s.store.CreatePasswordReset(ctx, u, token, nil, &m); err != nil {
		return err
	}
	s.nudge()
	return nil
}

// AdminPasswordReset makes a reset link for the user of userID, for an
// admin: with mail it is mailed to them (mailed true); without, its token
// is returned for the admin to pass on, shown this once. Either way the
// user's earlier reset links stop working, and it is audited.
func (s *Service) AdminPasswordReset(ctx context.Context, admin models.User, userID int64) (token string, mailed bool, err error) {
	if !admin.IsAdmin() {
		return "", false, apperr.New(apperr.Forbidden, "only admins may reset another user's password")
	}
	u, err := s.store.User(ctx, userID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return "", false, apperr.WithReason(apperr.NotFound, "user_not_found", "no user has this id")
	}
	if err != nil {
		return "", false, err
	}
	token = models.NewLinkToken()
	if s.mail == nil {
		_, err = s.store.CreatePasswordReset(ctx, u, token, &admin, nil)
		return token, false, err
	}
	m := queued(s.mail.Composer.PasswordReset(u.Email, token))
	if _, err = s.store.CreatePasswordReset(ctx, u, token, &admin, &m); err != nil {
		return "", false, err
	}
	s.nudge()
	return "", true, nil
}

// ConfirmPasswordReset uses a reset link: the password becomes password
// and every session of the user ends, on every node at once.
func (s *Service) ConfirmPasswordReset(ctx context.Context, token, password string) (models.User, error) {
	if err := ValidatePassword(password); err != nil {
		return models.User{}, apperr.Field(apperr.Unprocessable, "invalid_password", "new_password", apperr.As(err).Message)
	}
	// The link is checked before the hash (and again, atomically, when it
	// is used): a made-up or spent link costs no bcrypt hash, which no
	// throttle stands in front of.
	if err := s.store.CheckPasswordReset(ctx, token); err != nil {
		return models.User{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.bcryptCost)
	if err != nil {
		return models.User{}, apperr.Wrap(err, "hash password")
	}
	u, _, err := s.store.ResetPassword(ctx, token, string(hash))
	return u, err
}

// ChangePassword sets m's password to next after checking current, and
// ends every other session of theirs (keep is the stored id of the one
// that asked: Sessions.StoredID), on every node at once; it returns how
// many ended. Wrong current passwords are slowed down as failed sign-ins
// are, so a stolen session cannot guess its way to the password.
func (s *Service) ChangePassword(ctx context.Context, m models.Member, current, next, keep, clientIP string) (int64, error) {
	// The same buckets as sign-ins: a guess here is a guess at the
	// account's password from that address.
	attempt, err := s.throttle.reserve(ctx, m.Email, clientIP)
	if e := apperr.As(err); e != nil && e.Code == apperr.RateLimited {
		return 0, &apperr.Error{Code: apperr.RateLimited, Reason: "password_change_throttled", RetryAfter: e.RetryAfter,
			Message: "too many wrong passwords; try again in " + waitText(e.RetryAfter)}
	}
	if err != nil {
		return 0, err
	}
	u, err := s.store.User(ctx, m.ID)
	if err != nil {
		return 0, err
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(current)) != nil {
		return 0, apperr.Field(apperr.Forbidden, "wrong_password", "current_password", "the current password is wrong")
	}
	attempt.succeeded(ctx)
	if err := ValidatePassword(next); err != nil {
		return 0, apperr.Field(apperr.Unprocessable, "invalid_password", "new_password", apperr.As(err).Message)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(next), s.bcryptCost)
	if err != nil {
		return 0, apperr.Wrap(err, "hash password")
	}
	return s.store.ChangePassword(ctx, u, string(hash), keep)
}
