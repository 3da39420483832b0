// Package providers manages the operator's provider keys: sealed at rest,
// opened only to hand them to the upstream pool, and kept in step across
// nodes.
package providers

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
)

// sealContext binds ciphertexts to this use, so a sealed provider key
// pasted into another sealed field does not open there.
const sealContext = "sluice upstream key v1"

// Pool is the part of the upstream pool this package drives.
type Pool interface {
	SetKeys(keys []upstream.Key)
}

// Service creates, lists and deletes provider keys and feeds the pool.
type Service struct {
	store *models.Store
	box   *secrets.Box
	pool  Pool
	bus   cluster.Bus
	log   *slog.Logger
}

// New returns the provider key service.
func New(store *models.Store, box *secrets.Box, pool Pool, bus cluster.Bus, log *slog.Logger) *Service {
	return &Service{store: store, box: box, pool: pool, bus: bus, log: log}
}

// Create seals and stores a key, then puts it in rotation on every node.
func (s *Service) Create(ctx context.Context, admin models.User, in models.UpstreamKeyInput) (models.UpstreamKey, error) {
	if !admin.IsAdmin() {
		return models.UpstreamKey{}, apperr.New(apperr.Forbidden, "only admins may add provider keys")
	}
	if err := in.Validate(); err != nil {
		return models.UpstreamKey{}, err
	}
	if err := upstream.CheckBaseURL(in.Provider, in.BaseURL); err != nil {
		return models.UpstreamKey{}, apperr.New(apperr.Unprocessable, "%s", err.Error())
	}
	k, err := s.store.CreateUpstreamKey(ctx, admin, in, func(plain string) string { return s.box.Seal(plain, sealContext) })
	if err != nil {
		return k, err
	}
	return k, s.changed(ctx)
}

// Delete removes a key from the store and from rotation on every node.
func (s *Service) Delete(ctx context.Context, admin models.User, id int64) error {
	if !admin.IsAdmin() {
		return apperr.New(apperr.Forbidden, "only admins may delete provider keys")
	}
	if err := s.store.DeleteUpstreamKey(ctx, admin, id); err != nil {
		return err
	}
	return s.changed(ctx)
}

// PersistRefusals disables, in the store and on every node, each key the
// pool reports refused, until ctx ends or refusals is closed.
func (s *Service) PersistRefusals(ctx context.Context, refusals <-chan upstream.Refusal) {
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-refusals:
			if !ok {
				return
			}
			s.Disable(ctx, r.KeyID, r.Reason)
		}
	}
}

// Disable takes a key the provider refused (401/403) out of rotation for
// good, until an admin replaces it.
func (s *Service) Disable(ctx context.Context, keyID int64, reason string) {
	if err := s.store.DisableUpstreamKey(ctx, keyID, reason); err != nil && apperr.CodeOf(err) != apperr.NotFound {
		s.log.Error("disabling a provider key failed", "key_id", keyID, "err", err)
		return
	}
	s.log.Warn("provider refused a key; it is disabled until an admin replaces it", "key_id", keyID, "reason", reason)
	if err := s.changed(ctx); err != nil {
		s.log.Error("reloading provider keys failed", "err", err)
	}
}

// Reload hands the stored, enabled keys to the pool. A key that does not
// open (tampered, or sealed under another master key) is left out and
// logged, never sent anywhere.
func (s *Service) Reload(ctx context.Context) error {
	ks, err := s.store.UpstreamKeys(ctx)
	if err != nil {
		return err
	}
	var keys []upstream.Key
	for _, k := range ks {
		if k.DisabledAt != nil {
			continue
		}
		secret, err := s.box.Open(k.KeyCiphertext, sealContext)
		if err != nil {
			s.log.Error("a provider key does not decrypt; left out of rotation", "key_id", k.ID, "name", k.Name, "err", err)
			continue
		}
		keys = append(keys, upstream.Key{ID: k.ID, Name: k.Name, Provider: k.Provider, BaseURL: k.BaseURL, Secret: secret,
			Weight: k.Weight, RPM: k.RPM, TPM: k.TPM, Models: k.ModelList()})
	}
	s.pool.SetKeys(keys)
	return nil
}

func (s *Service) changed(ctx context.Context) error {
	_ = s.bus.Publish(ctx, cluster.Event{Kind: cluster.UpstreamsChanged})
	return s.Reload(ctx)
}
