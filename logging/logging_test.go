package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestEmailsAreHashedEverywhereInALine(t *testing.T) {
	var b bytes.Buffer
	log := New(&b, "info", "json")
	log.Info("login failed for Ada@Example.com", "email", "ada@example.com",
		"err", fmt.Errorf("wrapped: %w", errors.New(`duplicate key (lower(email))=(ada@example.com)`)), "n", 3)
	line := b.String()
	if strings.Contains(strings.ToLower(line), "ada@example.com") {
		t.Fatalf("an address reached the log: %s", line)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("not one JSON object: %v %s", err, line)
	}
	h := HashEmails("ada@example.com")
	if !strings.HasPrefix(h, "email:") || len(h) != len("email:")+12 || m["email"] != h ||
		!strings.Contains(m["msg"].(string), h) || !strings.Contains(m["err"].(string), h) || m["n"] != 3.0 {
		t.Fatalf("%v (hash %s)", m, h)
	}
	// The same person is the same hash, whatever the case.
	if HashEmails("ADA@example.com") != h {
		t.Fatal("hash depends on case")
	}
	b.Reset()
	New(&b, "info", "text").With("user", "bob@example.org").Info("x")
	if strings.Contains(b.String(), "bob@example.org") || !strings.Contains(b.String(), "email:") {
		t.Fatalf("text: %s", b.String())
	}
}

func TestRedactMasksPersonalData(t *testing.T) {
	cases := map[string]string{
		"mail me at jo.smith+x@mail.co.uk please": "mail me at [email] please",
		"card 4111 1111 1111 1111 exp 12/29":      "card [card] exp 12/29",
		"card 4111-1111-1111-1111":                "card [card]",
		"order 1234 5678 9012 3456 is not a card": "order 1234 5678 9012 3456 is not a card", // fails Luhn
		"call +1 (415) 555-0132 or 020 7946 0958": "call [phone] or [phone]",
		"写一副关于福的春联":                               "写一副关于福的春联",
		"version 1.2.3 and 42 apples":             "version 1.2.3 and 42 apples",
	}
	for in, want := range cases {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
