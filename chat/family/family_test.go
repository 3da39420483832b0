package family

import "testing"

// BoundFieldOf is the family's bound field, read without the rest.
func TestBoundFieldOfIsTheFamilys(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"gpt-5", "max_completion_tokens"},
		{"GPT-4o-mini", "max_completion_tokens"},
		{"openai/o3-mini", "max_completion_tokens"},
		{"ft:gpt-4o:org:x", "max_completion_tokens"},
		{"gpt-4", "max_tokens"},
		{"gpt-3.5-turbo", "max_tokens"},
		{"claude-sonnet-4-5", "max_tokens"},
		{"deepseek-chat", "max_tokens"},
		{"", "max_tokens"},
	} {
		if got := BoundFieldOf(tc.model); got != tc.want || got != Of(tc.model).BoundField {
			t.Errorf("BoundFieldOf(%q) = %q, Of's %q; want %q", tc.model, got, Of(tc.model).BoundField, tc.want)
		}
	}
}
