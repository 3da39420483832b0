package models

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// TokenControls narrow what one API token may do, under its
// organization's limits: the organization's tier and budget bind every
// token; a control binds only its own. The zero value controls nothing.
type TokenControls struct {
	// Models are the model and alias names the token may use; nil: every
	// model the gateway serves.
	Models []string `gorm:"serializer:json"`
	// MonthlyBudget is what the token may spend in a calendar month (UTC),
	// reserved and settled in the budget ledger as its organization's
	// budget is; nil: no budget of its own.
	MonthlyBudget *money.Amount
	// RequestsPerMinute is the token's own request bucket, charged with its
	// organization's and never above its tier's rate; nil: only the
	// organization's bucket.
	RequestsPerMinute *int64
	// AllowedIPs are the networks (CIDRs, canonical) its requests may come
	// from; nil: anywhere.
	AllowedIPs []string `gorm:"serializer:json"`
}

// Bounds of a token's controls.
const (
	MaxTokenModels  = 100
	MaxTokenIPs     = 32
	maxTokenModelID = 200
)

// Check validates and normalises the controls (models trimmed and each
// once, networks in canonical form), with errors naming the field.
func (c *TokenControls) Check() error {
	if c.Models != nil {
		ms, err := checkTokenModels(c.Models)
		if err != nil {
			return err
		}
		c.Models = ms
	}
	if c.AllowedIPs != nil {
		nets, err := ParseAllowedIPs(c.AllowedIPs)
		if err != nil {
			return err
		}
		c.AllowedIPs = make([]string, len(nets))
		for i, n := range nets {
			c.AllowedIPs[i] = n.String()
		}
	}
	if b := c.MonthlyBudget; b != nil && (*b < 0 || *b > money.MaxAmount) {
		return apperr.Field(apperr.Invalid, "invalid_monthly_budget", "monthly_budget",
			`monthly_budget must be a decimal string of dollars from "0.00" to "`+money.MaxAmount.String()+`", or null for none`)
	}
	if r := c.RequestsPerMinute; r != nil && *r < 1 {
		return apperr.Field(apperr.Invalid, "invalid_requests_per_minute", "requests_per_minute",
			"requests_per_minute must be a whole number of at least 1, or null for none")
	}
	return nil
}

func checkTokenModels(in []string) ([]string, error) {
	if len(in) == 0 {
		// An empty allow-list would make a token that can do nothing but
		// list no models: revoking it says that better.
		return nil, apperr.Field(apperr.Invalid, "invalid_models", "models",
			"models must name at least one model or alias, or be null for every model")
	}
	out := make([]string, 0, len(in))
	for i, m := range in {
		m = strings.TrimSpace(m)
		if m == "" || len(m) > maxTokenModelID {
			return nil, apperr.Field(apperr.Invalid, "invalid_models", "models",
				fmt.Sprintf("models[%d] must be a model or alias name of 1 to %d characters", i, maxTokenModelID))
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) > MaxTokenModels {
		return nil, apperr.Field(apperr.Invalid, "invalid_models", "models",
			fmt.Sprintf("models may name at most %d models (%d given)", MaxTokenModels, len(out)))
	}
	return out, nil
}

// ParseAllowedIPs reads a token's allowed networks: CIDRs such as
// "203.0.113.0/24" or "2001:db8::/32", or single addresses, at most
// MaxTokenIPs. A network with host bits set ("10.0.0.1/8") is refused
// rather than guessed at: it is either 10.0.0.0/8 or 10.0.0.1/32, and
// for an access control the difference matters.
func ParseAllowedIPs(in []string) ([]netip.Prefix, error) {
	if len(in) == 0 {
		return nil, apperr.Field(apperr.Invalid, "invalid_allowed_ips", "allowed_ips",
			"allowed_ips must name at least one network, or be null to allow any address")
	}
	if len(in) > MaxTokenIPs {
		return nil, apperr.Field(apperr.Invalid, "invalid_allowed_ips", "allowed_ips",
			fmt.Sprintf("allowed_ips may name at most %d networks (%d given)", MaxTokenIPs, len(in)))
	}
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil && !strings.Contains(s, "/") {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return nil, apperr.Field(apperr.Invalid, "invalid_allowed_ips", "allowed_ips",
				fmt.Sprintf("allowed_ips[%d] must be a network such as 203.0.113.0/24 or 2001:db8::/32, or an address", i))
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// Written as IPv6 (::ffff:203.0.113.0/120), meant as IPv4:
			// clients are matched by their unmapped address.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Masked() != p {
			return nil, apperr.Field(apperr.Invalid, "invalid_allowed_ips", "allowed_ips",
				fmt.Sprintf("allowed_ips[%d] %s has bits set past its /%d: write %s for the network or %s for the address",
					i, s, p.Bits(), p.Masked(), netip.PrefixFrom(p.Addr(), p.Addr().BitLen())))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Describe is the controls in words, for the audit log; "" when there are
// none.
func (c TokenControls) Describe() string {
	var parts []string
	if c.Models != nil {
		parts = append(parts, "models "+strings.Join(c.Models, ", "))
	}
	if c.MonthlyBudget != nil {
		parts = append(parts, "monthly_budget "+c.MonthlyBudget.String())
	}
	if c.RequestsPerMinute != nil {
		parts = append(parts, "requests_per_minute "+strconv.FormatInt(*c.RequestsPerMinute, 10))
	}
	if c.AllowedIPs != nil {
		parts = append(parts, "allowed_ips "+strings.Join(c.AllowedIPs, ", "))
	}
	return strings.Join(parts, "; ")
}

// Change is one field of a TokenPatch: Set says the request named it, To
// is its new value (nil, for a pointer or a list, removes the control).
type Change[T any] struct {
	Set bool
	To  T
}

// TokenPatch changes some of a token's settings; fields not Set keep
// their value.
type TokenPatch struct {
	Name              Change[string]
	ExpiresAt         Change[*time.Time]
	Models            Change[[]string]
	MonthlyBudget     Change[*money.Amount]
	RequestsPerMinute Change[*int64]
	AllowedIPs        Change[[]string]
}

// MayChangeToken says whether m may change t's settings: an owner any
// token of the organization, a member only the tokens they created.
func (m Member) MayChangeToken(t APIToken) bool {
	return m.IsOwner() || t.UserID == m.ID
}

var errMemberToken = apperr.WithReason(apperr.Forbidden, "not_your_token",
	"members may change only the tokens they created; ask an owner of the organization")

// UpdateAPIToken applies p to one of orgID's tokens, checked as a new
// token's settings are (requests_per_minute against the tier), and
// audits what changed. Another organization's token is not found; a
// revoked one cannot change; a member may change only their own. A token
// that had expired and is given a later expiry counts against the tier's
// token limit again, checked as a creation is.
func (s *Store) UpdateAPIToken(ctx context.Context, actor Member, orgID, id int64, p TokenPatch) (APIToken, error) {
	var t APIToken
	now := s.now().UTC()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		q := tx.Where("org_id = ? AND id = ?", orgID, id)
		if s.db.Dialector.Name() == "postgres" {
			// Two changes of one token at once: the second applies its
			// fields to what the first wrote, not to what both read.
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Take(&t).Error; err != nil {
			return dbErr(err, "token")
		}
		if !actor.MayChangeToken(t) {
			return errMemberToken
		}
		if t.RevokedAt != nil {
			return apperr.WithReason(apperr.Conflict, "token_revoked", "the token is revoked; its settings can no longer change")
		}
		old := t
		if p.Name.Set {
			t.Name = strings.TrimSpace(p.Name.To)
			if err := checkTokenName(t.Name); err != nil {
				return err
			}
		}
		if p.ExpiresAt.Set {
			t.ExpiresAt = p.ExpiresAt.To
		}
		applyChange(&t.Models, p.Models)
		applyChange(&t.MonthlyBudget, p.MonthlyBudget)
		applyChange(&t.RequestsPerMinute, p.RequestsPerMinute)
		applyChange(&t.AllowedIPs, p.AllowedIPs)
		if err := t.TokenControls.Check(); err != nil {
			return err
		}
		if err := checkTokenRate(tx, orgID, t.RequestsPerMinute); err != nil {
			return err
		}
		if old.Status(now) == "expired" && t.Status(now) == "active" {
			if err := s.checkTokenLimit(tx, orgID, now); err != nil {
				return err
			}
		}
		changes := describeChanges(old, t)
		if changes == "" {
			return nil
		}
		err := tx.Model(&APIToken{}).Where("org_id = ? AND id = ?", orgID, id).Select(
			"name", "expires_at", "models", "monthly_budget", "requests_per_minute", "allowed_ips").Updates(&t).Error
		if err != nil {
			return dbErr(err, "token")
		}
		return audit(tx, orgID, actor.ID, "token.update", fmt.Sprint(id), t.Name+": "+changes)
	})
	return t, dbErr(err, "token")
}

func applyChange[T any](dst *T, c Change[T]) {
	if c.Set {
		*dst = c.To
	}
}

func checkTokenName(name string) error {
	if name == "" || len(name) > maxTokenName {
		return apperr.New(apperr.Unprocessable, "name must be 1 to %d characters", maxTokenName)
	}
	return nil
}

// checkTokenRate refuses a token rate above its organization's tier's:
// a token's bucket is under its organization's, never a way around it.
// (Should the tier's rate fall later, the lower of the two applies.)
func checkTokenRate(tx *gorm.DB, orgID int64, rpm *int64) error {
	if rpm == nil {
		return nil
	}
	var tier struct {
		Name         string
		RefillPerSec float64
	}
	res := tx.Raw(`SELECT tiers.name, tiers.refill_per_sec FROM organizations JOIN tiers ON tiers.id = organizations.tier_id
		WHERE organizations.id = ?`, orgID).Scan(&tier)
	if res.Error != nil {
		return dbErr(res.Error, "organization")
	}
	if res.RowsAffected == 0 {
		return apperr.New(apperr.NotFound, "organization not found")
	}
	if most := TierRequestsPerMinute(tier.RefillPerSec); *rpm > most {
		return apperr.Field(apperr.Invalid, "invalid_requests_per_minute", "requests_per_minute", fmt.Sprintf(
			"requests_per_minute may be at most %d, the %s tier's rate (%s a second); %d is above it",
			most, tier.Name, strconv.FormatFloat(tier.RefillPerSec, 'f', -1, 64), *rpm))
	}
	return nil
}

// TierRequestsPerMinute is a tier's refill as whole requests a minute: the
// most a token's own rate may be.
func TierRequestsPerMinute(refillPerSec float64) int64 {
	return int64(math.Floor(refillPerSec*60 + 1e-9))
}

// describeChanges lists what differs between two versions of a token, for
// the audit log: "models all -> gpt-4o; requests_per_minute 10 -> none".
func describeChanges(a, b APIToken) string {
	var parts []string
	add := func(field, from, to string) {
		if from != to {
			parts = append(parts, field+" "+from+" -> "+to)
		}
	}
	add("name", a.Name, b.Name)
	add("expires_at", timeOrNever(a.ExpiresAt), timeOrNever(b.ExpiresAt))
	add("models", listOr(a.Models, "all"), listOr(b.Models, "all"))
	add("monthly_budget", amountOr(a.MonthlyBudget), amountOr(b.MonthlyBudget))
	add("requests_per_minute", intOr(a.RequestsPerMinute), intOr(b.RequestsPerMinute))
	add("allowed_ips", listOr(a.AllowedIPs, "any"), listOr(b.AllowedIPs, "any"))
	return strings.Join(parts, "; ")
}

func timeOrNever(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

func listOr(l []string, none string) string {
	if l == nil {
		return none
	}
	return strings.Join(l, ", ")
}

func amountOr(a *money.Amount) string {
	if a == nil {
		return "none"
	}
	return a.String()
}

func intOr(n *int64) string {
	if n == nil {
		return "none"
	}
	return strconv.FormatInt(*n, 10)
}

// TokenSpentInMonth is what one token has been billed in the month
// starting at period, from the hourly rollups: where a token's budget
// balance starts.
func (s *Store) TokenSpentInMonth(ctx context.Context, orgID, tokenID int64, period time.Time) (money.Amount, error) {
	from := MonthOf(period)
	var cost money.Amount
	err := s.db.WithContext(ctx).Raw(`SELECT COALESCE(SUM(cost), 0) FROM usage_hourly
		WHERE org_id = ? AND token_id = ? AND hour >= ? AND hour < ?`, orgID, tokenID, from, from.AddDate(0, 1, 0)).Scan(&cost).Error
	return cost, dbErr(err, "token usage")
}
