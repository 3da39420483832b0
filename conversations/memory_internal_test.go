package conversations

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestMemoryEvictsLeastRecentlySavedWhenFull(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemory(time.Hour, func() time.Time { return clock })
	m.max = 3
	scope := func(i int) Scope { return Scope{OrgID: 1, TokenID: 1, ID: fmt.Sprint("s", i)} }
	for i := range 3 {
		if err := m.Save(ctx, scope(i), nil); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Second)
	}
	// Saving s0 again makes s1 the least recently saved.
	if err := m.Save(ctx, scope(0), nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(ctx, scope(3), nil); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 3 {
		t.Fatalf("Len = %d, want the cap 3", m.Len())
	}
	for i, want := range []bool{true, false, true, true} {
		if _, ok, _ := m.Load(ctx, scope(i)); ok != want {
			t.Errorf("s%d present = %v, want %v", i, ok, want)
		}
	}
}
