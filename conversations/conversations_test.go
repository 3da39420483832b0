package conversations_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/conversations"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"chat-42", true},
		{"user_7.thread:3", true},
		{"ABC-xyz.0_9:-", true},
		{strings.Repeat("a", 128), true},
		{"", false},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"slash/", false},
		{"brace{", false},
		{"star*", false},
		{"question?", false},
		{"percent%20", false},
		{"newline\n", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := conversations.ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
