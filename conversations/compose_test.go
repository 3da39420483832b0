package conversations_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/conversations"
)

func sys(c string) chat.Message  { return chat.Message{Role: "system", Content: c} }
func user(c string) chat.Message { return chat.Message{Role: "user", Content: c} }
func asst(c string) chat.Message { return chat.Message{Role: "assistant", Content: c} }

// words counts one token per space-separated word, so budgets in the tests
// are easy to work out: a message costs words+4.
func words(s string) int { return len(strings.Fields(s)) }

func TestComposeWithinBudget(t *testing.T) {
	history := []chat.Message{sys("be brief"), user("one"), asst("two")}
	incoming := []chat.Message{user("three")}
	got := conversations.Compose(history, incoming, 1000, words)
	want := []chat.Message{sys("be brief"), user("one"), asst("two"), user("three")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Compose = %v, want %v", got, want)
	}
	if got := conversations.Compose(history, incoming, 0, words); !reflect.DeepEqual(got, want) {
		t.Fatalf("Compose with no budget = %v, want %v", got, want)
	}
}

func TestComposeDropsOldestTurnsInPairs(t *testing.T) {
	history := []chat.Message{
		sys("s"),         // 5
		user("u1 u1"),    // 6
		asst("a1 a1"),    // 6
		user("u2"),       // 5
		asst("a2"),       // 5
		sys("late rule"), // 6: a system message mid-history, never dropped
		user("u3"),       // 5
		asst("a3"),       // 5
	}
	incoming := []chat.Message{user("q")} // 5
	// Everything costs 48. A budget of 40 needs 8 dropped: the oldest pair
	// (12) goes, and u2 is not dropped alone.
	got := conversations.Compose(history, incoming, 40, words)
	want := []chat.Message{sys("s"), user("u2"), asst("a2"), sys("late rule"), user("u3"), asst("a3"), user("q")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("budget 40: Compose = %v, want %v", got, want)
	}
	// A budget of 26 drops the first two pairs (22) -> 26.
	got = conversations.Compose(history, incoming, 26, words)
	want = []chat.Message{sys("s"), sys("late rule"), user("u3"), asst("a3"), user("q")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("budget 26: Compose = %v, want %v", got, want)
	}
}

func TestComposeNeverDropsIncomingOrSystem(t *testing.T) {
	history := []chat.Message{sys("s"), user("old"), asst("old")}
	incoming := []chat.Message{user("a very long question indeed"), asst("prefill"), user("and more")}
	got := conversations.Compose(history, incoming, 1, words)
	want := []chat.Message{sys("s"), user("a very long question indeed"), asst("prefill"), user("and more")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Compose = %v, want %v", got, want)
	}
}

func TestComposeSystemMessage(t *testing.T) {
	history := []chat.Message{sys("stored"), user("u1"), asst("a1")}

	// A client resending the stored system prompt does not duplicate it.
	got := conversations.Compose(history, []chat.Message{sys("stored"), user("u2")}, 0, words)
	want := []chat.Message{sys("stored"), user("u1"), asst("a1"), user("u2")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resent system: Compose = %v, want %v", got, want)
	}

	// A different incoming system message is kept, after the stored one.
	got = conversations.Compose(history, []chat.Message{sys("new rule"), user("u2")}, 0, words)
	want = []chat.Message{sys("stored"), user("u1"), asst("a1"), sys("new rule"), user("u2")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("new system: Compose = %v, want %v", got, want)
	}

	// With no stored system prompt, the incoming one leads.
	got = conversations.Compose([]chat.Message{user("u1"), asst("a1")}, []chat.Message{user("u2"), sys("late")}, 0, words)
	want = []chat.Message{sys("late"), user("u1"), asst("a1"), user("u2")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("incoming system: Compose = %v, want %v", got, want)
	}
}

func TestComposeDefaultCounter(t *testing.T) {
	history := []chat.Message{user(strings.Repeat("word ", 100)), asst("ok")}
	got := conversations.Compose(history, []chat.Message{user("hi")}, 20, nil)
	want := []chat.Message{user("hi")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Compose with chat.CountTokens = %v, want %v", got, want)
	}
}

func TestComposeDoesNotModifyArguments(t *testing.T) {
	history := []chat.Message{user("u1 u1 u1"), asst("a1"), user("u2"), asst("a2")}
	incoming := []chat.Message{sys("s"), user("q")}
	h := append([]chat.Message{}, history...)
	in := append([]chat.Message{}, incoming...)
	_ = conversations.Compose(history, incoming, 15, words)
	_ = conversations.Append(history, incoming, asst("r"))
	if !reflect.DeepEqual(history, h) || !reflect.DeepEqual(incoming, in) {
		t.Fatal("Compose or Append modified its arguments")
	}
}

func TestAppend(t *testing.T) {
	got := conversations.Append(nil, []chat.Message{sys("s"), user("q1")}, asst("r1"))
	want := []chat.Message{sys("s"), user("q1"), asst("r1")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("first turn: Append = %v, want %v", got, want)
	}
	// Second turn: the client resends the system prompt; it is not stored twice.
	got = conversations.Append(got, []chat.Message{sys("s"), user("q2")}, asst("r2"))
	want = []chat.Message{sys("s"), user("q1"), asst("r1"), user("q2"), asst("r2")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second turn: Append = %v, want %v", got, want)
	}
	// Bounded storage: append to what Compose kept.
	composed := conversations.Compose(got, []chat.Message{user("q3")}, 20, words)
	got = conversations.Append(composed, nil, asst("r3"))
	want = []chat.Message{sys("s"), user("q2"), asst("r2"), user("q3"), asst("r3")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bounded: Append = %v, want %v", got, want)
	}
}
