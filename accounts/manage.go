package accounts

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/signing"
)

// MaxTokenDays bounds an API token's optional lifetime.
const MaxTokenDays = 3650

// CreateToken issues an API token for m in m's organization;
// expiresInDays 0 means it never expires. The plain text is returned once.
// Members and owners alike may.
func (s *Service) CreateToken(ctx context.Context, m models.Member, name string, expiresInDays int) (models.APIToken, string, error) {
	return s.IssueToken(ctx, m, TokenSettings{Name: name, ExpiresInDays: expiresInDays})
}

// TokenSettings are what a new token is made with.
type TokenSettings struct {
	Name string
	// ExpiresInDays (1 to MaxTokenDays) or ExpiresAt, not both, say when
	// it expires; neither: never.
	ExpiresInDays int
	ExpiresAt     *time.Time
	Controls      models.TokenControls
}

// IssueToken issues an API token for m in m's organization with its
// settings and controls (checked: see models.TokenControls.Check). The
// plain text is returned once. Members and owners alike may.
func (s *Service) IssueToken(ctx context.Context, m models.Member, in TokenSettings) (models.APIToken, string, error) {
	if err := NeedOrganization(m); err != nil {
		return models.APIToken{}, "", err
	}
	name := strings.TrimSpace(in.Name)
	if in.ExpiresInDays < 0 || in.ExpiresInDays > MaxTokenDays {
		return models.APIToken{}, "", apperr.New(apperr.Unprocessable, "expires_in_days must be from 0 (never) to %d", MaxTokenDays)
	}
	expires := in.ExpiresAt
	switch {
	case expires != nil && in.ExpiresInDays > 0:
		return models.APIToken{}, "", apperr.Field(apperr.Invalid, "invalid_expiry", "expires_at",
			"send expires_in_days or expires_at, not both")
	case expires != nil:
		if err := s.checkExpiry(*expires); err != nil {
			return models.APIToken{}, "", err
		}
	case in.ExpiresInDays > 0:
		t := time.Now().UTC().AddDate(0, 0, in.ExpiresInDays)
		expires = &t
	}
	return s.store.CreateAPITokenWith(ctx, m.OrgID, m.ID, name, expires, in.Controls)
}

// checkExpiry bounds an expiry set as a time: after now, and no later than
// the longest lifetime a token may have.
func (s *Service) checkExpiry(t time.Time) error {
	now := s.dir.now()
	if !t.After(now) {
		return apperr.Field(apperr.Invalid, "invalid_expiry", "expires_at",
			"expires_at must be in the future (it is "+now.UTC().Format(time.RFC3339)+" now); revoke a token to stop it at once")
	}
	if t.After(now.AddDate(0, 0, MaxTokenDays)) {
		return apperr.Field(apperr.Invalid, "invalid_expiry", "expires_at",
			fmt.Sprintf("expires_at may be at most %d days ahead", MaxTokenDays))
	}
	return nil
}

// UpdateToken changes one of m's organization's tokens (an owner's any,
// a member's only their own) and makes every node's gateway see the change
// with its next request, as a revocation does. Setting a monthly budget
// brings the token's ledger balance up to what the store has billed it
// (its spending went untracked while it had none).
func (s *Service) UpdateToken(ctx context.Context, m models.Member, id int64, p models.TokenPatch) (models.APIToken, error) {
	if err := NeedOrganization(m); err != nil {
		return models.APIToken{}, err
	}
	if p.ExpiresAt.Set && p.ExpiresAt.To != nil {
		if err := s.checkExpiry(*p.ExpiresAt.To); err != nil {
			return models.APIToken{}, err
		}
		utc := p.ExpiresAt.To.UTC()
		p.ExpiresAt.To = &utc
	}
	t, err := s.store.UpdateAPIToken(ctx, m, m.OrgID, id, p)
	if err != nil {
		return t, err
	}
	s.dir.ForgetToken(t.Hash)
	s.publish(ctx, cluster.Event{Kind: cluster.TokenChanged, Hash: t.Hash})
	if p.MonthlyBudget.Set && t.MonthlyBudget != nil && s.ledger != nil {
		if err := s.ledger.Resync(ctx, models.LedgerAccount{OrgID: t.OrgID, TokenID: t.ID}, s.dir.now()); err != nil {
			s.ledgerLog.Warn("bringing a token's budget balance up to the store failed; the balance is kept as it was",
				"token_id", t.ID, "err", err)
		}
	}
	return t, nil
}

// Tokens lists the tokens of m's organization m may manage: an owner every
// one, a member their own.
func (s *Service) Tokens(ctx context.Context, m models.Member) ([]models.APIToken, error) {
	if err := NeedOrganization(m); err != nil {
		return nil, err
	}
	ts, err := s.store.APITokens(ctx, m.OrgID)
	if err != nil || m.IsOwner() {
		return ts, err
	}
	own := ts[:0]
	for _, t := range ts {
		if t.UserID == m.ID {
			own = append(own, t)
		}
	}
	return own, nil
}

// manageableToken checks that m may change token id of their
// organization: an owner any, a member only one they created. Another
// organization's token is not found.
func (s *Service) manageableToken(ctx context.Context, m models.Member, id int64, what string) error {
	if err := NeedOrganization(m); err != nil {
		return err
	}
	if m.IsOwner() {
		return nil
	}
	t, err := s.store.OrganizationAPIToken(ctx, m.OrgID, id)
	if err != nil {
		return err
	}
	if t.UserID != m.ID {
		return apperr.WithReason(apperr.Forbidden, "not_your_token",
			"members may "+what+" only the tokens they created; ask an owner to "+what+" this one")
	}
	return nil
}

// RevokeToken revokes one of m's organization's tokens (an owner's pick, or
// a member's own) and makes the gateway forget it at once.
func (s *Service) RevokeToken(ctx context.Context, m models.Member, id int64) (models.APIToken, error) {
	if err := s.manageableToken(ctx, m, id, "revoke"); err != nil {
		return models.APIToken{}, err
	}
	t, err := s.store.RevokeAPIToken(ctx, m.User, m.OrgID, id)
	if err == nil {
		s.forgetTokens(ctx, t.Hash)
	}
	return t, err
}

// SetTokenSigning makes one of m's organization's tokens (an owner's pick,
// or a member's own) require signed requests, with a new signing secret it
// returns (shown this once; asking again replaces it), or take unsigned
// ones again (required false, secret ""). Every node's gateway sees the
// change with its next request.
func (s *Service) SetTokenSigning(ctx context.Context, m models.Member, id int64, required bool) (t models.APIToken, secret string, err error) {
	if err := s.manageableToken(ctx, m, id, "change signing of"); err != nil {
		return t, "", err
	}
	var seal func(int64) string
	if required {
		if s.dir.box == nil {
			return t, "", errSigningOff
		}
		secret = signing.NewSecret()
		seal = func(tokenID int64) string { return s.dir.box.Seal(secret, signingSealContext(tokenID)) }
	}
	t, err = s.store.SetTokenSigning(ctx, m.User, m.OrgID, id, seal)
	if err != nil {
		return t, "", err
	}
	s.forgetTokens(ctx, t.Hash)
	return t, secret, nil
}

// forgetTokens makes this node's gateway and every other node's forget the
// tokens of hashes at once.
func (s *Service) forgetTokens(ctx context.Context, hashes ...string) {
	for _, h := range hashes {
		s.dir.ForgetToken(h)
		s.publish(ctx, cluster.Event{Kind: cluster.TokenChanged, Hash: h})
	}
}

// UpdateTier changes a tier's settings; the next API request, on every
// node, uses them. New plan terms also reach this node's included-credit
// limits at once, and other nodes' within the token cache TTL.
func (s *Service) UpdateTier(ctx context.Context, admin models.User, name string, l models.TierSettings) (models.Tier, error) {
	if !admin.IsAdmin() {
		return models.Tier{}, apperr.New(apperr.Forbidden, "only admins may change tiers")
	}
	old := s.dir.Tier(name)
	t, err := s.store.UpdateTier(ctx, admin, name, l)
	if err != nil {
		return t, err
	}
	if old == nil || !old.TermsFrom.Equal(t.TermsFrom) {
		s.dir.forgetTier(t.Name)
	}
	s.publish(ctx, cluster.Event{Kind: cluster.TiersChanged})
	return t, s.dir.ReloadTiers(ctx)
}

// CreateTier adds a tier, on every node.
func (s *Service) CreateTier(ctx context.Context, admin models.User, name string, l models.TierSettings) (models.Tier, error) {
	if !admin.IsAdmin() {
		return models.Tier{}, apperr.New(apperr.Forbidden, "only admins may create tiers")
	}
	t, err := s.store.CreateTier(ctx, admin, name, l)
	if err != nil {
		return t, err
	}
	s.publish(ctx, cluster.Event{Kind: cluster.TiersChanged})
	return t, s.dir.ReloadTiers(ctx)
}

// DeleteTier removes a tier no organization is on, on every node.
func (s *Service) DeleteTier(ctx context.Context, admin models.User, name string) error {
	if !admin.IsAdmin() {
		return apperr.New(apperr.Forbidden, "only admins may delete tiers")
	}
	if err := s.store.DeleteTier(ctx, admin, name); err != nil {
		return err
	}
	s.publish(ctx, cluster.Event{Kind: cluster.TiersChanged})
	return s.dir.ReloadTiers(ctx)
}

// SetOrganizationTier moves an organization to a tier; its tokens' next
// requests use the new limits.
func (s *Service) SetOrganizationTier(ctx context.Context, admin models.User, orgID int64, tier string) (models.Organization, error) {
	if !admin.IsAdmin() {
		return models.Organization{}, apperr.New(apperr.Forbidden, "only admins may change an organization's tier")
	}
	o, err := s.store.SetOrganizationTier(ctx, admin, orgID, tier)
	if err == nil {
		s.dir.ForgetOrganization(orgID)
		s.publish(ctx, cluster.Event{Kind: cluster.OrgChanged, ID: orgID})
	}
	return o, err
}

// Freeze suspends a caller's token after count rejections within a minute,
// for its tier's freeze duration: persisted and audited first, then honoured
// here at once and on other nodes as soon as they hear of it.
func (s *Service) Freeze(ctx context.Context, c Caller, count int, now time.Time) (models.Freeze, error) {
	until := now.Add(time.Duration(c.Tier.FreezeMinutes) * time.Minute)
	f, err := s.store.CreateFreeze(ctx, models.Freeze{
		TokenID: c.TokenID, OrgID: c.OrgID, WindowCount: count, FrozenFrom: now.UTC(), FrozenUntil: until.UTC(),
		Reason: fmt.Sprintf("%d requests were rejected for exceeding the rate limit within one minute (the %s tier freezes at %d)",
			count, c.Tier.Name, c.Tier.FreezeThreshold),
	})
	if err != nil {
		return f, err
	}
	s.dir.freezes.Put(quota.Freeze{TokenID: f.TokenID, Until: f.FrozenUntil, Reason: f.Reason})
	s.publish(ctx, cluster.Event{Kind: cluster.FreezesChanged})
	return f, nil
}

// LiftFreeze ends a freeze early, on every node.
func (s *Service) LiftFreeze(ctx context.Context, admin models.User, id int64) (models.Freeze, error) {
	if !admin.IsAdmin() {
		return models.Freeze{}, apperr.New(apperr.Forbidden, "only admins may lift freezes")
	}
	f, err := s.store.LiftFreeze(ctx, admin, id)
	if err != nil {
		return f, err
	}
	s.publish(ctx, cluster.Event{Kind: cluster.FreezesChanged})
	return f, s.dir.ReloadFreezes(ctx)
}

// ApplyTuning stores the auto-tuner's changes and makes every node use them.
func (s *Service) ApplyTuning(ctx context.Context, evs []models.TuningEvent) error {
	if err := s.store.ApplyTuning(ctx, evs); err != nil {
		return err
	}
	s.publish(ctx, cluster.Event{Kind: cluster.TiersChanged})
	return s.dir.ReloadTiers(ctx)
}

// publish tells the other nodes. A lost message does not fail the change
// itself: the bus logs it, and every node's periodic reload catches up.
func (s *Service) publish(ctx context.Context, e cluster.Event) {
	_ = s.bus.Publish(ctx, e)
}
