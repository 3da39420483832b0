package accounts

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// Identity is who an OpenID Connect provider says signed in: its issuer,
// the account's subject, and an email the provider has verified.
type Identity struct {
	Issuer, Subject, Email string
}

// SignInWithIdentity returns the user an identity provider vouched for,
// acting where their sign-in starts, making or linking them on their first
// sign-in:
//
//   - an account linked before is its user, whatever email it asserts now;
//   - else the user with the same email is linked to it;
//   - else, when the email's domain is one of domains, a new user joins
//     that organization as a member (the provider vouches for its people:
//     not throttled, so a whole office can join in an hour);
//   - else a new user gets an organization of their own on the free tier,
//     as a password signup does, through the same throttle.
//
// Two first sign-ins of one account at once make one user: the one that
// loses the race reads what the other made.
func (s *Service) SignInWithIdentity(ctx context.Context, id Identity, domains map[string]int64, clientIP string) (models.Member, error) {
	if id.Issuer == "" || id.Subject == "" {
		return models.Member{}, apperr.WithReason(apperr.Unauthorized, "sso_no_subject", "the identity provider did not say who signed in; try again")
	}
	if err := ValidateEmail(id.Email); err != nil {
		return models.Member{}, apperr.WithReason(apperr.Forbidden, "sso_email_invalid",
			"the identity provider's email address for you is not one Sluice can use; ask your administrator")
	}
	m, err := s.signInWithIdentity(ctx, id, domains, clientIP)
	if e := apperr.As(err); err != nil && e.Code == apperr.Conflict && (e.Reason == "identity_taken" || e.Reason == "email_taken") {
		m, err = s.signInWithIdentity(ctx, id, domains, clientIP)
	}
	return m, err
}

func (s *Service) signInWithIdentity(ctx context.Context, id Identity, domains map[string]int64, clientIP string) (models.Member, error) {
	u, err := s.store.IdentityUser(ctx, id.Issuer, id.Subject, id.Email)
	if err == nil {
		return s.store.StartingMember(ctx, u)
	}
	if apperr.CodeOf(err) != apperr.NotFound {
		return models.Member{}, err
	}
	link := models.UserIdentity{Issuer: id.Issuer, Subject: id.Subject, Email: id.Email}
	u, revoked, err := s.store.LinkIdentity(ctx, link)
	if err == nil {
		s.forgetTokens(ctx, revoked...)
		return s.store.StartingMember(ctx, u)
	}
	if apperr.CodeOf(err) != apperr.NotFound {
		return models.Member{}, err
	}
	domain := emailDomain(id.Email)
	if orgID, ok := domains[domain]; ok {
		m, err := s.store.CreateIdentityMember(ctx, link, orgID)
		if e := apperr.As(err); err != nil && e.Code == apperr.NotFound && e.Reason == "" {
			// The operator's SLUICE_OIDC_DOMAINS names an organization
			// that is gone (it was there at start).
			return models.Member{}, apperr.WithReason(apperr.Forbidden, "sso_organization_missing",
				"single sign-on for "+domain+" is set up for an organization that no longer exists; ask the operator to fix SLUICE_OIDC_DOMAINS")
		}
		return m, err
	}
	giveBack, err := s.signups.take(ctx, clientIP)
	if err != nil {
		return models.Member{}, err
	}
	// As in signup: a failure on our side gives the signup back.
	_, m, err := s.store.CreateIdentityOrganization(ctx, link, ssoOrganizationName(id.Email), "free")
	if err != nil && apperr.Status(apperr.CodeOf(err)) >= 500 {
		giveBack()
	}
	return m, err
}

// emailDomain is what follows the last @ of email, lower case.
func emailDomain(email string) string {
	return strings.ToLower(email[strings.LastIndexByte(email, '@')+1:])
}

// ssoOrganizationName names the organization of someone who signed up by
// single sign-on, who chose no name: their email, cut to the 100
// characters an organization's name may have.
func ssoOrganizationName(email string) string {
	name := models.NormalizeEmail(email)
	for utf8.RuneCountInString(name) > 100 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}
