package accounts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/secrets"
)

// Caller is who is calling the metered API: the token, its organization and
// the tier whose limits apply.
type Caller struct {
	TokenID int64
	OrgID   int64
	UserID  int64
	Tier    *models.Tier // shared, read-only snapshot
	// RequestsKey and TPMKey name the organization's request and
	// tokens-per-minute buckets: a tier's limits bind the organization, so
	// every token of it spends from the same two. They are built once per
	// cache fill so the hot path does not format them per request. The
	// part before '|' is the same, so the Redis limiter keeps both in one
	// hash slot; a token's own rate (TokenRequestsKey) is
	// "org:<id>|tok:<id>", in that slot too, so that all of them are
	// charged in one script.
	RequestsKey string
	TPMKey      string
	// TokenKey names the token itself ("tok:<id>") where state is the
	// token's and not the organization's: its rejections counted toward a
	// freeze (freezes stay per token) and its recent prompts.
	TokenKey string
	// Budget is the organization's monthly spending limit, if any.
	Budget models.Budget
	// IncludedCredit is the organization's included credit this month,
	// prorated over the tiers and terms in force in it; read at cache fill.
	IncludedCredit money.Amount
	// CreditWithheld says IncludedCredit is 0 until an owner of the
	// organization verifies their email (the tier's
	// credit_needs_verified_email), which a refusal says.
	CreditWithheld bool
	// TokenPrefix is the token's display prefix (sk_sluice_ and 6
	// characters), what logs may say of it; never the token.
	TokenPrefix string
	// SigningSecret is the key of the HMAC the token's requests must carry;
	// nil when it takes unsigned requests. Shared, read-only.
	SigningSecret []byte

	// The token's own controls (models.TokenControls), read at cache fill.
	// Models are the model and alias names it may use, nil for every one;
	// shared, read-only.
	Models []string
	// TokenBudget is the token's own monthly budget, nil for none.
	TokenBudget *money.Amount
	// LowBalanceThreshold is the organization's low-balance alert on a
	// prepaid tier, nil for none.
	LowBalanceThreshold *money.Amount
	// TokenRequestsKey names the token's own request bucket,
	// "org:<id>|tok:<id>" (in its organization's Redis slot, so both are
	// charged in one script); "" when it has none.
	TokenRequestsKey string
	// TokenRequestsPerMinute is its rate, 0 for none.
	TokenRequestsPerMinute int64
	// AllowedIPs are the networks its requests may come from, nil for
	// anywhere; shared, read-only.
	AllowedIPs []netip.Prefix
}

// MayUseModel says whether the token may ask for model (a model or an
// alias, by the name the client sends).
func (c Caller) MayUseModel(model string) bool {
	return c.Models == nil || slices.Contains(c.Models, model)
}

// AllowsAddress says whether a request from addr may use the token.
func (c Caller) AllowsAddress(addr netip.Addr) bool {
	if c.AllowedIPs == nil {
		return true
	}
	addr = addr.Unmap()
	for _, p := range c.AllowedIPs {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// SpendLimit is what the organization may spend in a month before its
// requests are refused, and what that limit is called: the month's
// included credit when the tier blocks overage (and is not prepaid), the budget when it is a
// hard stop, the lower of the two when both apply. ok is false when
// nothing limits spending.
func (c Caller) SpendLimit() (limit money.Amount, what string, ok bool) {
	// On a prepaid tier the balance is what limits spending; the included
	// credit is an invoiced tier's.
	if c.Tier.Overage == models.OverageBlock && !c.Tier.Prepaid() {
		limit, what, ok = c.IncludedCredit, "the "+c.Tier.Name+" tier's included credit", true
		if c.CreditWithheld {
			what = "the " + c.Tier.Name + " tier's included credit, which waits for a verified email: an owner of the organization must confirm " +
				"their address with the link Sluice mailed them (the account page sends a new one)"
		}
	}
	if b := c.Budget.Limit; b != nil && c.Budget.HardStop && (!ok || *b < limit) {
		limit, what, ok = *b, "the organization's monthly budget", true
	}
	return limit, what, ok
}

// TracksSpending says whether the request path must follow the
// organization's spending as it happens: it has a limit, or a budget that
// only raises alerts.
func (c Caller) TracksSpending() bool {
	_, _, limited := c.SpendLimit()
	return limited || c.Budget.Limit != nil
}

// LimitsSpending says whether anything limits what the request may cost:
// the organization's spending limit, its prepaid balance or the token's own
// budget.
func (c Caller) LimitsSpending() bool {
	_, _, limited := c.SpendLimit()
	return limited || c.TokenBudget != nil || c.Prepaid()
}

// Prepaid says the organization's requests spend from its prepaid balance.
func (c Caller) Prepaid() bool { return c.Tier.Prepaid() }

// Directory resolves API tokens for the gateway. It caches what the
// database said about each token hash (negatively too, for unknown tokens)
// for a TTL, and keeps every tier in memory, so a request reads the database
// only on a cache miss. Revocations, tier edits and tier changes of an
// organization are applied to the cache at once by whoever makes them.
type Directory struct {
	store      *models.Store
	ttl        time.Duration
	now        func() time.Time
	maxEntries int

	mu     sync.RWMutex
	tokens map[[sha256.Size]byte]tokenEntry
	// unknown counts the entries of tokens for keys the database does not
	// know (guarded by mu): a full cache with none is not scanned for room
	// for another.
	unknown int
	// forgets counts invalidations (guarded by mu). A lookup that started
	// before one must not cache what it read: it may be the state the
	// invalidation was about.
	forgets uint64

	tiers atomic.Pointer[map[string]*models.Tier]

	freezes *quota.FreezeSet

	box *secrets.Box // seals and opens signing secrets; nil: signing is off
}

type tokenEntry struct {
	known            bool
	owner            models.TokenOwner
	requestsKey      string
	tpmKey           string
	tokenKey         string
	tokenRequestsKey string // "" when the token has no rate of its own
	allowedIPs       []netip.Prefix
	signingSecret    []byte
	fetchedAt        time.Time
}

// DirectoryOption adjusts a Directory.
type DirectoryOption func(*Directory)

// WithSigningSecrets has tokens' signing secrets sealed and opened with
// box. Without it no token can be set to require signed requests.
func WithSigningSecrets(box *secrets.Box) DirectoryOption {
	return func(d *Directory) { d.box = box }
}

// NewDirectory loads the tiers and returns an empty token cache.
func NewDirectory(ctx context.Context, store *models.Store, ttl time.Duration, now func() time.Time, opts ...DirectoryOption) (*Directory, error) {
	if now == nil {
		now = time.Now
	}
	d := &Directory{store: store, ttl: ttl, now: now, maxEntries: 100_000, tokens: map[[sha256.Size]byte]tokenEntry{},
		freezes: quota.NewFreezeSet(now)}
	for _, o := range opts {
		o(d)
	}
	if err := d.ReloadTiers(ctx); err != nil {
		return nil, err
	}
	return d, d.ReloadFreezes(ctx)
}

// Errors of Authenticate; each has its own code so clients can tell them apart.
var (
	errMissingKey   = apperr.WithReason(apperr.Unauthorized, "missing_api_key", "no API key: send it as 'Authorization: Bearer sk_sluice_…'")
	errMalformedKey = apperr.WithReason(apperr.Unauthorized, "malformed_api_key", "the API key is malformed: Sluice keys start with sk_sluice_ and carry a checksum")
	errUnknownKey   = apperr.WithReason(apperr.Unauthorized, "invalid_api_key", "the API key is not valid")
	errRevokedKey   = apperr.WithReason(apperr.Unauthorized, "revoked_api_key", "the API key has been revoked")
	errExpiredKey   = apperr.WithReason(apperr.Unauthorized, "expired_api_key", "the API key has expired")
	errUserDisabled = apperr.WithReason(apperr.Unauthorized, "user_disabled", "this token's user is disabled: an admin must enable them for it to work")
	errOrgDeleted   = apperr.WithReason(apperr.Unauthorized, "organization_deleted", "this token's organization has been deleted")
	errMemberGone   = apperr.WithReason(apperr.Unauthorized, "revoked_api_key", "the API key has been revoked: its user is no longer a member of its organization")
)

// refusal is why a known token cannot be used now, nil when it can.
func refusal(o models.TokenOwner, now time.Time) error {
	switch {
	case o.RevokedAt != nil:
		return errRevokedKey
	case o.OrgDeletedAt != nil:
		return errOrgDeleted
	case o.UserDisabledAt != nil:
		return errUserDisabled
	case o.MemberGone:
		return errMemberGone
	case o.ExpiresAt != nil && !now.Before(*o.ExpiresAt):
		return errExpiredKey
	}
	return nil
}

// Authenticate resolves a plain-text API token to its caller.
func (d *Directory) Authenticate(ctx context.Context, secret string) (Caller, error) {
	if secret == "" {
		return Caller{}, errMissingKey
	}
	if !models.CheckTokenSyntax(secret) {
		return Caller{}, errMalformedKey
	}
	sum := sha256.Sum256([]byte(secret))
	now := d.now()

	d.mu.RLock()
	e, ok := d.tokens[sum]
	forgets := d.forgets
	d.mu.RUnlock()
	if !ok || now.Sub(e.fetchedAt) >= d.ttl {
		owner, err := d.store.TokenOwnerByHash(ctx, hex.EncodeToString(sum[:]))
		if err != nil && apperr.CodeOf(err) != apperr.NotFound {
			return Caller{}, err
		}
		if e, err = d.entry(owner, err == nil); err != nil {
			return Caller{}, err
		}
		e.fetchedAt = now
		d.remember(sum, e, forgets)
	}
	if !e.known {
		return Caller{}, errUnknownKey
	}
	if err := refusal(e.owner, now); err != nil {
		return Caller{}, err
	}
	return d.caller(e)
}

// caller is the Caller of a usable token's cache entry.
func (d *Directory) caller(e tokenEntry) (Caller, error) {
	tier := d.Tier(e.owner.TierName)
	if tier == nil {
		return Caller{}, apperr.Wrap(errUnknownTier, e.owner.TierName)
	}
	c := Caller{TokenID: e.owner.ID, OrgID: e.owner.OrgID, UserID: e.owner.UserID, Tier: tier,
		RequestsKey: e.requestsKey, TPMKey: e.tpmKey, TokenKey: e.tokenKey,
		Budget: models.Budget{Limit: e.owner.BudgetLimit, HardStop: e.owner.BudgetHardStop}, TokenPrefix: e.owner.Prefix,
		SigningSecret: e.signingSecret, IncludedCredit: e.owner.IncludedCredit, CreditWithheld: e.owner.CreditWithheld,
		Models: e.owner.Models, TokenBudget: e.owner.MonthlyBudget, AllowedIPs: e.allowedIPs,
		LowBalanceThreshold: e.owner.LowBalanceThreshold}
	if rpm := e.owner.RequestsPerMinute; rpm != nil {
		c.TokenRequestsKey, c.TokenRequestsPerMinute = e.tokenRequestsKey, *rpm
	}
	return c, nil
}

// entry is what the cache keeps of a token: its keys formatted and its
// signing secret opened once per fill, not per request.
func (d *Directory) entry(owner models.TokenOwner, known bool) (tokenEntry, error) {
	org := "org:" + strconv.FormatInt(owner.OrgID, 10)
	e := tokenEntry{known: known, owner: owner, requestsKey: org, tpmKey: org + "|tpm",
		tokenKey: "tok:" + strconv.FormatInt(owner.ID, 10)}
	if owner.RequestsPerMinute != nil {
		e.tokenRequestsKey = org + "|" + e.tokenKey
	}
	if owner.AllowedIPs != nil {
		nets, err := models.ParseAllowedIPs(owner.AllowedIPs)
		if err != nil {
			// Stored only after the same check: a row changed by hand. The
			// token must not fail open to every address.
			return e, apperr.Wrap(err, "the token's allowed_ips")
		}
		e.allowedIPs = nets
	}
	if owner.SigningSecret != nil {
		if d.box == nil {
			return e, errSigningOff
		}
		secret, err := d.box.Open(*owner.SigningSecret, signingSealContext(owner.ID))
		if err != nil {
			return e, apperr.Wrap(err, "open the token's signing secret")
		}
		e.signingSecret = []byte(secret)
	}
	return e, nil
}

var errSigningOff = apperr.New(apperr.Internal, "a token requires signed requests but this node has no master key to open its secret")

// signingSealContext binds a sealed signing secret to its token, so a
// secret copied onto another token's row does not open.
func signingSealContext(tokenID int64) string {
	return "api_tokens.signing_secret:" + strconv.FormatInt(tokenID, 10)
}

// CallerByTokenID resolves a token by id, for work queued earlier on its
// behalf: a job runs only while its token is still good, under the tier and
// budget its organization has now. It reads the database (jobs are not the
// hot path) and fails as Authenticate does for a revoked or expired token,
// a disabled user's or a deleted organization's.
func (d *Directory) CallerByTokenID(ctx context.Context, id int64) (Caller, error) {
	owner, err := d.store.TokenOwnerByID(ctx, id)
	switch {
	case apperr.CodeOf(err) == apperr.NotFound:
		return Caller{}, errUnknownKey
	case err != nil:
		return Caller{}, err
	}
	if err := refusal(owner, d.now()); err != nil {
		return Caller{}, err
	}
	e, err := d.entry(owner, true)
	if err != nil {
		return Caller{}, err
	}
	return d.caller(e)
}

var errUnknownTier = apperr.New(apperr.Internal, "organization's tier is not loaded")

func (d *Directory) remember(sum [sha256.Size]byte, e tokenEntry, forgetsBefore uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.forgets != forgetsBefore {
		return // an invalidation raced this lookup; the next request reads again
	}
	if len(d.tokens) >= d.maxEntries {
		if !e.known && d.unknown == 0 {
			return // full of real tokens: an unknown key is not kept
		}
		// Full: the stale entries go, and the unknown keys' (anyone can
		// make up keys, and a flood of them must not push out the real
		// ones, which would send every request to the database).
		for k, old := range d.tokens {
			if !old.known || e.fetchedAt.Sub(old.fetchedAt) >= d.ttl {
				d.drop(k, old)
			}
		}
		if len(d.tokens) >= d.maxEntries {
			if !e.known {
				return
			}
			clear(d.tokens) // more real tokens than it holds: start over rather than grow
			d.unknown = 0
		}
	}
	if old, ok := d.tokens[sum]; ok {
		d.drop(sum, old)
	}
	if !e.known {
		d.unknown++
	}
	d.tokens[sum] = e
}

// drop deletes the entry e of sum, counting it off; mu is held.
func (d *Directory) drop(sum [sha256.Size]byte, e tokenEntry) {
	delete(d.tokens, sum)
	if !e.known {
		d.unknown--
	}
}

// ForgetToken drops a token hash (hex, as stored) from the cache, after a
// revocation.
func (d *Directory) ForgetToken(hash string) {
	var sum [sha256.Size]byte
	if n, err := hex.Decode(sum[:], []byte(hash)); err != nil || n != len(sum) {
		return
	}
	d.mu.Lock()
	if e, ok := d.tokens[sum]; ok {
		d.drop(sum, e)
	}
	d.forgets++
	d.mu.Unlock()
}

// ForgetOrganization drops every cached token of an organization, after its
// tier changed.
func (d *Directory) ForgetOrganization(orgID int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgets++
	for k, e := range d.tokens {
		if e.known && e.owner.OrgID == orgID {
			d.drop(k, e)
		}
	}
}

// ReloadTiers replaces the in-memory tiers with the database's.
func (d *Directory) ReloadTiers(ctx context.Context) error {
	ts, err := d.store.Tiers(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*models.Tier, len(ts))
	for i := range ts {
		m[ts[i].Name] = &ts[i]
	}
	d.tiers.Store(&m)
	return nil
}

// Tier returns the current snapshot of a tier, nil if there is none.
func (d *Directory) Tier(name string) *models.Tier {
	if m := d.tiers.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// Tiers is the current snapshot of every tier.
func (d *Directory) Tiers() []*models.Tier {
	m := d.tiers.Load()
	if m == nil {
		return nil
	}
	out := make([]*models.Tier, 0, len(*m))
	for _, t := range *m {
		out = append(out, t)
	}
	return out
}

// ActiveFreezes counts the freezes in force, for operators.
func (d *Directory) ActiveFreezes() int { return d.freezes.Active() }

// Frozen reports the freeze in force for a token, if any. It reads an
// in-memory set: no database, no lock, no allocation.
func (d *Directory) Frozen(tokenID int64) (quota.Freeze, bool) { return d.freezes.Frozen(tokenID) }

// ReloadFreezes replaces the in-memory freezes with the database's active
// ones: how freezes and lifts made on other nodes arrive.
func (d *Directory) ReloadFreezes(ctx context.Context) error {
	fs, err := d.store.ActiveFreezes(ctx, d.now())
	if err != nil {
		return err
	}
	set := make([]quota.Freeze, len(fs))
	for i, f := range fs {
		set[i] = quota.Freeze{TokenID: f.TokenID, Until: f.FrozenUntil, Reason: f.Reason}
	}
	d.freezes.Replace(set)
	return nil
}

// Apply brings the caches up to date with a change another node made.
func (d *Directory) Apply(ctx context.Context, e cluster.Event) error {
	switch e.Kind {
	case cluster.TokenChanged:
		d.ForgetToken(e.Hash)
	case cluster.OrgChanged:
		d.ForgetOrganization(e.ID)
	case cluster.TiersChanged:
		return d.ReloadTiers(ctx)
	case cluster.FreezesChanged:
		return d.ReloadFreezes(ctx)
	}
	return nil
}
