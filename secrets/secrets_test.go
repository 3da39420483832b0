package secrets

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func box(t *testing.T, fill byte) *Box {
	b, err := NewBox(bytes.Repeat([]byte{fill}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealOpen(t *testing.T) {
	b := box(t, 1)
	sealed := b.Seal("sk-live-secret-1234", "upstream_key")
	if strings.Contains(sealed, "secret") || strings.Contains(sealed, "1234") {
		t.Fatal("plaintext visible in the ciphertext")
	}
	if again := b.Seal("sk-live-secret-1234", "upstream_key"); again == sealed {
		t.Fatal("two seals of one secret are equal: the nonce is not fresh")
	}
	got, err := b.Open(sealed, "upstream_key")
	if err != nil || got != "sk-live-secret-1234" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestTamperedCiphertextIsRejected(t *testing.T) {
	b := box(t, 1)
	sealed := b.Seal("sk-live-secret", "upstream_key")
	raw, _ := base64.StdEncoding.DecodeString(sealed)
	raw[len(raw)-1] ^= 1
	flipped := base64.StdEncoding.EncodeToString(raw)
	cases := map[string]func() (string, error){
		"flipped bit":      func() (string, error) { return b.Open(flipped, "upstream_key") },
		"truncated":        func() (string, error) { return b.Open(sealed[:10], "upstream_key") },
		"not base64":       func() (string, error) { return b.Open("!!!", "upstream_key") },
		"other context":    func() (string, error) { return b.Open(sealed, "session_secret") },
		"other master key": func() (string, error) { return box(t, 2).Open(sealed, "upstream_key") },
	}
	for name, open := range cases {
		if got, err := open(); err != ErrTampered || got != "" {
			t.Errorf("%s: %q %v", name, got, err)
		}
	}
}

func TestMasterKeyFileIsCreatedOnceAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateMasterKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateMasterKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatal("a second start made a new master key")
	}
	fi, _ := os.Stat(filepath.Join(dir, "master.key"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	for _, bad := range []string{"", "abc", strings.Repeat("0", 63)} {
		if _, err := ParseMasterKey(bad); err == nil {
			t.Errorf("ParseMasterKey(%q) accepted", bad)
		}
	}
	if _, err := ParseMasterKey(base64.StdEncoding.EncodeToString(k1)); err != nil {
		t.Error(err)
	}
}
