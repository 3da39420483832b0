package models

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"math/big"

	"github.com/sluicehq/sluice/apperr"
)

// An API token is "sk_sluice_" + 43 base62 characters (32 random bytes) + a
// 6-character base62 CRC-32 of those characters. The checksum lets the
// gateway reject a mistyped or made-up token before touching the database.
const (
	TokenPrefix      = "sk_sluice_"
	tokenBodyLen     = 43 // ceil(256 bits / log2(62))
	tokenChecksumLen = 6  // 62^6 > 2^32
	tokenLen         = len(TokenPrefix) + tokenBodyLen + tokenChecksumLen
	displayLen       = len(TokenPrefix) + 6
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewTokenSecret returns a fresh API token in plain text. It is shown to
// its owner once and never stored.
func NewTokenSecret() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", apperr.Wrap(err, "read random")
	}
	body := encodeBase62(new(big.Int).SetBytes(raw[:]), tokenBodyLen)
	return TokenPrefix + body + checksum(body), nil
}

// CheckTokenSyntax reports whether s is shaped like a Sluice token with a
// valid checksum. It allocates nothing, so it is cheap on the hot path.
func CheckTokenSyntax(s string) bool {
	if len(s) != tokenLen || s[:len(TokenPrefix)] != TokenPrefix {
		return false
	}
	for i := len(TokenPrefix); i < len(s); i++ {
		if !isBase62(s[i]) {
			return false
		}
	}
	body := s[len(TokenPrefix) : len(TokenPrefix)+tokenBodyLen]
	var want [tokenChecksumLen]byte
	putChecksum(want[:], body)
	return string(want[:]) == s[len(TokenPrefix)+tokenBodyLen:]
}

// HashToken is the only form of a token the database ever sees.
func HashToken(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TokenDisplayPrefix is the part of a token safe to show again, so owners can
// tell their tokens apart.
func TokenDisplayPrefix(s string) string {
	if len(s) < displayLen {
		return s
	}
	return s[:displayLen]
}

func isBase62(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

func checksum(body string) string {
	var b [tokenChecksumLen]byte
	putChecksum(b[:], body)
	return string(b[:])
}

func putChecksum(dst []byte, body string) {
	c := uint64(crc32IEEE(body))
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = base62[c%62]
		c /= 62
	}
}

func encodeBase62(n *big.Int, width int) string {
	out := make([]byte, width)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := width - 1; i >= 0; i-- {
		n.DivMod(n, base, mod)
		out[i] = base62[mod.Int64()]
	}
	return string(out)
}

// crc32IEEE is crc32.ChecksumIEEE over a string without converting it to a
// byte slice, which would allocate on the hot path.
func crc32IEEE(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc = crc32.IEEETable[byte(crc)^s[i]] ^ (crc >> 8)
	}
	return ^crc
}
