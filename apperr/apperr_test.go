package apperr

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	want := map[Code]int{
		Invalid: 400, Unprocessable: 422, TooLarge: 413, Unauthorized: 401, Forbidden: 403,
		NotFound: 404, NotAllowed: 405, Conflict: 409, RateLimited: 429, Frozen: 429, NoCredit: 429,
		Unavailable: 503, BadUpstream: 502, Timeout: 504, Internal: 500, Code("made-up"): 500,
	}
	for code, status := range want {
		if got := Status(code); got != status {
			t.Errorf("Status(%s) = %d, want %d", code, got, status)
		}
	}
}

func TestForeignErrorsAreInternalAndHideTheirText(t *testing.T) {
	cause := errors.New("pq: password authentication failed for user sluice")
	e := As(fmt.Errorf("open: %w", cause))
	if e.Code != Internal || strings.Contains(e.Message, "password") || Status(e.Code) != http.StatusInternalServerError {
		t.Fatalf("%+v", e)
	}
	if !errors.Is(e, cause) {
		t.Fatal("the cause must stay reachable for the logs")
	}
	w := Wrap(cause, "connect")
	if w.Message != "internal error" || !errors.Is(w, cause) {
		t.Fatalf("%+v", w)
	}
	if CodeOf(nil) != "" || CodeOf(New(NotFound, "x")) != NotFound || CodeOf(fmt.Errorf("wrapped: %w", New(Conflict, "y"))) != Conflict {
		t.Fatal("CodeOf")
	}
}
