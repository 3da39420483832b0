package models

import (
	"strings"
	"testing"
)

// FuzzCheckTokenSyntax checks the token shape and checksum on any input:
// it never panics; it accepts exactly the strings that are the prefix, 43
// base62 characters and their checksum (so a token round-trips through
// its own checksum); and it refuses a valid token with any one character
// changed — the checksum catches every single-character typo.
func FuzzCheckTokenSyntax(f *testing.F) {
	valid, err := NewTokenSecret()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, uint(12), byte('A'))
	f.Add(valid[:len(valid)-1]+"0", uint(0), byte('z'))
	f.Add(strings.Replace(valid, "sk_sluice_", "sk_Sluice_", 1), uint(58), byte('9'))
	f.Add("", uint(0), byte(0))
	f.Add("sk_sluice_", uint(3), byte('_'))
	f.Add(TokenPrefix+strings.Repeat("0", tokenBodyLen)+checksum(strings.Repeat("0", tokenBodyLen)), uint(20), byte('1'))
	f.Add(TokenPrefix+strings.Repeat("é", 24)+"aaaaa", uint(11), byte(0xff))
	f.Fuzz(func(t *testing.T, s string, pos uint, c byte) {
		ok := CheckTokenSyntax(s)
		shaped := len(s) == tokenLen && strings.HasPrefix(s, TokenPrefix) && allBase62(s[len(TokenPrefix):])
		if ok {
			body := s[len(TokenPrefix) : len(TokenPrefix)+tokenBodyLen]
			if !shaped || s != TokenPrefix+body+checksum(body) {
				t.Fatalf("accepted %q, which is not prefix+body+checksum(body)", s)
			}
		} else if shaped && s[len(TokenPrefix)+tokenBodyLen:] == checksum(s[len(TokenPrefix):len(TokenPrefix)+tokenBodyLen]) {
			t.Fatalf("refused %q, a well-formed token with a valid checksum", s)
		}
		if p := TokenDisplayPrefix(s); !strings.HasPrefix(s, p) || len(p) > displayLen {
			t.Fatalf("display prefix %q of %q", p, s)
		}
		if h := HashToken(s); len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			t.Fatalf("hash %q is not 64 hex digits", h)
		}

		// One typo in a valid token is always caught.
		tok := s
		if !ok {
			tok = valid
		}
		i := len(TokenPrefix) + int(pos%uint(tokenBodyLen+tokenChecksumLen))
		sub := base62[int(c)%len(base62)]
		if sub == tok[i] {
			sub = base62[(int(c)+1)%len(base62)]
		}
		typo := tok[:i] + string(sub) + tok[i+1:]
		if CheckTokenSyntax(typo) {
			t.Fatalf("%q with position %d changed to %q passed the checksum", tok, i, sub)
		}
	})
}

func allBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBase62(s[i]) {
			return false
		}
	}
	return true
}
