package providers

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
)

// Aliases keeps the model aliases: stored and audited through the store,
// and held on every node as one immutable table behind an atomic pointer,
// so a request resolves its model without a database read or a lock. A
// change is applied on the node that made it at once and on the others
// when they hear of it on the bus (cluster.AliasesChanged), or at their
// next periodic reload.
type Aliases struct {
	store *models.Store
	bus   cluster.Bus
	log   *slog.Logger
	table atomic.Pointer[aliasTable]
}

// aliasTable is one generation of the aliases; never changed once stored.
type aliasTable struct {
	byName map[string]*models.ModelAlias
	names  []string // sorted
}

// NewAliases returns the alias service with an empty table; Reload fills it.
func NewAliases(store *models.Store, bus cluster.Bus, log *slog.Logger) *Aliases {
	a := &Aliases{store: store, bus: bus, log: log}
	a.table.Store(&aliasTable{})
	return a
}

// Alias returns the alias called name, if there is one. The alias is
// shared: callers must not change it.
func (a *Aliases) Alias(name string) (*models.ModelAlias, bool) {
	al, ok := a.table.Load().byName[name]
	return al, ok
}

// Names lists the aliases' names, sorted (shared, read-only).
func (a *Aliases) Names() []string { return a.table.Load().names }

// List reads every alias from the store, for the admin.
func (a *Aliases) List(ctx context.Context) ([]models.ModelAlias, error) {
	return a.store.ModelAliases(ctx)
}

// Reload replaces the table with the stored aliases.
func (a *Aliases) Reload(ctx context.Context) error {
	as, err := a.store.ModelAliases(ctx)
	if err != nil {
		return err
	}
	t := &aliasTable{byName: make(map[string]*models.ModelAlias, len(as)), names: make([]string, 0, len(as))}
	for i := range as {
		t.byName[as[i].Name] = &as[i]
		t.names = append(t.names, as[i].Name)
	}
	slices.Sort(t.names)
	a.table.Store(t)
	return nil
}

// Create stores a new alias and puts it in force on every node.
func (a *Aliases) Create(ctx context.Context, admin models.User, in models.ModelAliasInput) (models.ModelAlias, error) {
	if !admin.IsAdmin() {
		return models.ModelAlias{}, apperr.New(apperr.Forbidden, "only admins may define model aliases")
	}
	al, err := a.store.CreateModelAlias(ctx, admin, in)
	if err != nil {
		return al, err
	}
	return al, a.changed(ctx)
}

// Update replaces an alias's targets and fallbacks on every node.
func (a *Aliases) Update(ctx context.Context, admin models.User, name string, in models.ModelAliasInput) (models.ModelAlias, error) {
	if !admin.IsAdmin() {
		return models.ModelAlias{}, apperr.New(apperr.Forbidden, "only admins may change model aliases")
	}
	al, err := a.store.UpdateModelAlias(ctx, admin, name, in)
	if err != nil {
		return al, err
	}
	return al, a.changed(ctx)
}

// Delete removes an alias on every node.
func (a *Aliases) Delete(ctx context.Context, admin models.User, name string) error {
	if !admin.IsAdmin() {
		return apperr.New(apperr.Forbidden, "only admins may delete model aliases")
	}
	if err := a.store.DeleteModelAlias(ctx, admin, name); err != nil {
		return err
	}
	return a.changed(ctx)
}

// changed tells the other nodes and reloads this one's table. The change
// is stored whatever happens here: a node that misses the message finds it
// at its next periodic reload.
func (a *Aliases) changed(ctx context.Context) error {
	_ = a.bus.Publish(ctx, cluster.Event{Kind: cluster.AliasesChanged})
	return a.Reload(ctx)
}
