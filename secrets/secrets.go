// Package secrets seals provider keys at rest with AES-256-GCM under the
// master key, so a database dump alone reveals none of them.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the master key's length: AES-256.
const KeySize = 32

// Box seals and opens secrets with one master key.
type Box struct {
	aead cipher.AEAD
}

// NewBox returns a box for a 32-byte master key.
func NewBox(master []byte) (*Box, error) {
	if len(master) != KeySize {
		return nil, fmt.Errorf("secrets: master key must be %d bytes, got %d", KeySize, len(master))
	}
	block, err := aes.NewCipher(master)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to context (e.g. "upstream_key"), so a
// ciphertext copied into another kind of field does not open. The result is
// base64 of nonce||ciphertext||tag.
func (b *Box) Seal(plaintext, context string) string {
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	out := b.aead.Seal(nonce, nonce, []byte(plaintext), []byte(context))
	return base64.StdEncoding.EncodeToString(out)
}

// ErrTampered is returned for a ciphertext that does not open: altered,
// truncated, sealed under another master key or for another context.
var ErrTampered = errors.New("secrets: ciphertext does not open (tampered, or another master key)")

// Open decrypts what Seal produced with the same context.
func (b *Box) Open(sealed, context string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(raw) < b.aead.NonceSize()+b.aead.Overhead() {
		return "", ErrTampered
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], []byte(context))
	if err != nil {
		return "", ErrTampered
	}
	return string(plain), nil
}

// ParseMasterKey reads a master key written as 64 hex digits or as base64
// of 32 bytes.
func ParseMasterKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	return nil, errors.New("must be 32 bytes as 64 hex digits or base64 (e.g. openssl rand -hex 32)")
}

// LoadOrCreateMasterKey reads dir/master.key, creating it (mode 0600) with a
// fresh random key the first time: the embedded default's way to have a
// master key without setup. Losing the file loses every sealed secret.
func LoadOrCreateMasterKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, "master.key")
	if b, err := os.ReadFile(path); err == nil {
		key, err := ParseMasterKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, KeySize)
	rand.Read(key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another process won the race
			return LoadOrCreateMasterKey(dir)
		}
		return nil, err
	}
	defer f.Close()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return nil, err
	}
	return key, f.Sync()
}
