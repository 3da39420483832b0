package providers

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
)

type fakePool struct {
	mu   sync.Mutex
	keys []upstream.Key
}

func (p *fakePool) SetKeys(keys []upstream.Key) { p.mu.Lock(); p.keys = keys; p.mu.Unlock() }

const plain = "sk-live-VERY-SECRET-abcd"

func TestProviderKeysAreSealedAtRest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		box, _ := secrets.NewBox(bytes.Repeat([]byte{7}, 32))
		var logs bytes.Buffer
		pool := &fakePool{}
		svc := New(store, box, pool, cluster.None{}, slog.New(slog.NewTextHandler(&logs, nil)))
		_, admin, _ := store.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
		_, member, _ := store.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)

		in := models.UpstreamKeyInput{Name: "openai-1", BaseURL: "https://api.example.com/openai/v1/", APIKey: plain, Weight: 2, RPM: 600, Models: []string{"gpt-4o-mini"}}
		if _, err := svc.Create(ctx, member.User, in); apperr.CodeOf(err) != apperr.Forbidden {
			t.Fatalf("a member adding a key: %v", err)
		}
		k, err := svc.Create(ctx, admin.User, in)
		if err != nil {
			t.Fatal(err)
		}
		if k.KeyLast4 != "abcd" || k.BaseURL != "https://api.example.com/openai/v1" {
			t.Fatalf("%+v", k)
		}
		// Nothing in any column of the row, nor in the audit log, is the key.
		var dump []map[string]any
		db.Gorm.Raw("SELECT * FROM upstream_keys").Scan(&dump)
		db2 := []map[string]any{}
		db.Gorm.Raw("SELECT * FROM audit_log").Scan(&db2)
		for _, row := range append(dump, db2...) {
			for col, v := range row {
				if s, ok := v.(string); ok && strings.Contains(s, "VERY-SECRET") {
					t.Fatalf("plaintext in column %s", col)
				}
			}
		}
		if len(pool.keys) != 1 || pool.keys[0].Secret != plain || pool.keys[0].Weight != 2 || pool.keys[0].Models[0] != "gpt-4o-mini" {
			t.Fatalf("pool got %+v", pool.keys)
		}

		// A tampered ciphertext is refused, logged without the secret, and
		// the key stays out of rotation.
		db.Gorm.Exec("UPDATE upstream_keys SET key_ciphertext = ? WHERE id = ?", box.Seal("sk-attacker-key", "something else"), k.ID)
		if err := svc.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if len(pool.keys) != 0 {
			t.Fatalf("a tampered key is in rotation: %+v", pool.keys)
		}
		if !strings.Contains(logs.String(), "does not decrypt") || strings.Contains(logs.String(), "VERY-SECRET") || strings.Contains(logs.String(), "attacker") {
			t.Fatalf("logs: %s", logs.String())
		}

		// A disabled key stays out after a reload, on every node.
		k2, _ := svc.Create(ctx, admin.User, models.UpstreamKeyInput{Name: "two", BaseURL: "http://127.0.0.1:9/v1", APIKey: "sk-second-key-9999", Weight: 1})
		svc.Disable(ctx, k2.ID, "provider answered 401")
		for _, k := range pool.keys {
			if k.ID == k2.ID {
				t.Fatal("a disabled key is in rotation")
			}
		}
		if err := svc.Delete(ctx, admin.User, k2.ID); err != nil {
			t.Fatal(err)
		}
		if err := svc.Delete(ctx, admin.User, k2.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("deleting twice: %v", err)
		}
	})
}

func TestUpstreamKeyValidation(t *testing.T) {
	ok := models.UpstreamKeyInput{Name: "a", BaseURL: "https://x.example/v1", APIKey: "sk-12345678", Weight: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*models.UpstreamKeyInput){
		"name":     func(in *models.UpstreamKeyInput) { in.Name = "" },
		"base_url": func(in *models.UpstreamKeyInput) { in.BaseURL = "ftp://x" },
		"api_key":  func(in *models.UpstreamKeyInput) { in.APIKey = "short" },
		"weight":   func(in *models.UpstreamKeyInput) { in.Weight = 0 },
		"rpm":      func(in *models.UpstreamKeyInput) { in.RPM = -1 },
		"models":   func(in *models.UpstreamKeyInput) { in.Models = []string{"a,b"} },
	}
	for field, change := range bad {
		in := ok
		change(&in)
		if err := in.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

func TestRefusedKeysArePersistedAndLeaveRotation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := models.NewStore(testdb.SQLite(t))
	box, _ := secrets.NewBox(bytes.Repeat([]byte{7}, 32))
	pool := &fakePool{}
	svc := New(store, box, pool, cluster.None{}, slog.New(slog.DiscardHandler))
	_, admin, _ := store.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
	k, err := svc.Create(ctx, admin.User, models.UpstreamKeyInput{Name: "one", BaseURL: "http://127.0.0.1:9/v1", APIKey: "sk-refused-key-1", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	refusals := make(chan upstream.Refusal)
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.PersistRefusals(ctx, refusals)
	}()
	refusals <- upstream.Refusal{KeyID: k.ID, Reason: "the provider refused the key: 401 Unauthorized"}
	close(refusals) // PersistRefusals returns once it has handled what came
	<-done
	ks, err := store.UpstreamKeys(ctx)
	if err != nil || len(ks) != 1 || ks[0].DisabledAt == nil || !strings.Contains(ks[0].DisabledReason, "401") {
		t.Fatalf("stored %+v %v", ks, err)
	}
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if len(pool.keys) != 0 {
		t.Fatalf("a refused key is still in rotation: %+v", pool.keys)
	}
}
