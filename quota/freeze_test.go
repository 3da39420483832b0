package quota

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock moves only when told, so window and expiry tests never sleep.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func reject(t testing.TB, d *Detector, key string, threshold int) (int, bool) {
	t.Helper()
	n, freeze, err := d.Rejected(context.Background(), key, threshold)
	if err != nil {
		t.Fatalf("Rejected(%q): %v", key, err)
	}
	return n, freeze
}

func TestDetectorFreezesOnTwentiethRejection(t *testing.T) {
	clock := newManualClock()
	d := NewDetector(NewMemoryWindow(clock.Now))
	for i := 1; i <= 19; i++ {
		if n, freeze := reject(t, d, "tok", 20); freeze || n != i {
			t.Fatalf("rejection %d: count %d, freeze %v; want count %d, no freeze", i, n, freeze, i)
		}
		clock.Advance(time.Second)
	}
	if n, freeze := reject(t, d, "tok", 20); !freeze || n != 20 {
		t.Fatalf("20th rejection: count %d, freeze %v; want 20, freeze", n, freeze)
	}
	if n, freeze := reject(t, d, "tok", 20); freeze || n != 21 {
		t.Fatalf("21st rejection: count %d, freeze %v; want 21, no second freeze", n, freeze)
	}
	if _, freeze := reject(t, d, "other", 1); !freeze {
		t.Fatal("threshold 1: first rejection of another key should freeze it")
	}
	for range 30 {
		if _, freeze := reject(t, d, "never", 0); freeze {
			t.Fatal("threshold 0 must never freeze")
		}
	}
}

func TestMemoryWindowSlides(t *testing.T) {
	clock := newManualClock()
	w := NewMemoryWindow(clock.Now)
	add := func() int {
		n, err := w.Add(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 19 {
		add()
	}
	clock.Advance(59 * time.Second)
	if n := add(); n != 20 {
		t.Fatalf("59s later: count %d, want 20 (the first 19 are still in the minute)", n)
	}
	clock.Advance(time.Second)
	if n := add(); n != 2 {
		t.Fatalf("60s after the first 19: count %d, want 2", n)
	}
	clock.Advance(10 * time.Minute)
	if n := add(); n != 1 {
		t.Fatalf("after a long pause: count %d, want 1", n)
	}
	clock.Advance(-30 * time.Second) // a clock stepping back still counts
	if n := add(); n != 2 {
		t.Fatalf("clock stepped back: count %d, want 2", n)
	}
}

// A rejection every 4 s is 15 a minute: never 20, however long it goes on.
func TestDetectorSlowRejectionsNeverFreeze(t *testing.T) {
	clock := newManualClock()
	d := NewDetector(NewMemoryWindow(clock.Now))
	for i := range 300 {
		if n, freeze := reject(t, d, "slow", 20); freeze || n > 15 {
			t.Fatalf("rejection %d: count %d, freeze %v", i, n, freeze)
		}
		clock.Advance(4 * time.Second)
	}
}

func TestMemoryWindowConcurrentOneFreeze(t *testing.T) {
	d := NewDetector(NewMemoryWindow(newManualClock().Now))
	var freezes atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 4 {
				if _, freeze := reject(t, d, "hot", 20); freeze {
					freezes.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := freezes.Load(); got != 1 {
		t.Fatalf("%d freezes from 200 concurrent rejections, want exactly 1", got)
	}
}

func TestMemoryWindowEvictsIdleKeys(t *testing.T) {
	clock := newManualClock()
	w := NewMemoryWindow(clock.Now)
	const n = 20000
	for i := range n {
		w.Add(context.Background(), fmt.Sprintf("old-%d", i))
	}
	clock.Advance(2 * time.Minute)
	for i := range n {
		w.Add(context.Background(), fmt.Sprintf("new-%d", i))
	}
	total := 0
	for i := range w.stripes {
		total += len(w.stripes[i].keys)
	}
	if total >= n*3/2 {
		t.Fatalf("%d keys kept after %d went idle and %d new arrived; idle keys are not evicted", total, n, n)
	}
}

func TestFreezeSet(t *testing.T) {
	clock := newManualClock()
	s := NewFreezeSet(clock.Now)
	if _, ok := s.Frozen(1); ok {
		t.Fatal("empty set reports a freeze")
	}
	s.Put(Freeze{TokenID: 1, Until: clock.Now().Add(10 * time.Minute), Reason: "20 rejections in a minute"})
	s.Put(Freeze{TokenID: 2, Until: clock.Now().Add(time.Minute)})
	s.Put(Freeze{TokenID: 3, Until: clock.Now()}) // already over
	if f, ok := s.Frozen(1); !ok || f.Reason != "20 rejections in a minute" {
		t.Fatalf("token 1: %+v, %v; want frozen with its reason", f, ok)
	}
	if _, ok := s.Frozen(3); ok {
		t.Fatal("a freeze ending now is not in force")
	}

	clock.Advance(time.Minute)
	if _, ok := s.Frozen(2); ok {
		t.Fatal("token 2 still frozen after its minute: freezes must lift by themselves")
	}
	if _, ok := s.Frozen(1); !ok {
		t.Fatal("token 1 lifted before its 10 minutes")
	}

	s.Put(Freeze{TokenID: 5, Until: clock.Now().Add(time.Hour)})
	s.Replace([]Freeze{
		{TokenID: 6, Until: clock.Now().Add(time.Hour)},
		{TokenID: 7, Until: clock.Now().Add(-time.Second)},
	})
	if _, ok := s.Frozen(5); ok {
		t.Fatal("Replace kept a freeze that the new list no longer has")
	}
	if _, ok := s.Frozen(6); !ok {
		t.Fatal("Replace lost token 6")
	}
	if _, ok := s.Frozen(7); ok {
		t.Fatal("Replace installed an expired freeze")
	}
	if n := len(*s.m.Load()); n != 1 {
		t.Fatalf("%d entries kept, want 1: expired freezes must not pile up", n)
	}

	if allocs := testing.AllocsPerRun(1000, func() { s.Frozen(6); s.Frozen(8) }); allocs != 0 {
		t.Fatalf("Frozen allocates %v times per call", allocs)
	}
}

func TestFreezeSetConcurrent(t *testing.T) {
	clock := newManualClock()
	s := NewFreezeSet(clock.Now)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					s.Frozen(int64(r))
				}
			}
		})
	}
	for i := range 500 {
		s.Put(Freeze{TokenID: int64(i % 8), Until: clock.Now().Add(time.Minute)})
		if i%7 == 0 {
			s.Put(Freeze{TokenID: int64(i % 8), Until: clock.Now().Add(-time.Second)})
		}
		if i%50 == 0 {
			s.Replace(nil)
		}
	}
	close(stop)
	wg.Wait()
}

// freezeStore stands in for the freezes table shared by all nodes.
type freezeStore struct {
	mu   sync.Mutex
	rows map[int64]Freeze
}

func (st *freezeStore) save(f Freeze) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rows[f.TokenID] = f
}

func (st *freezeStore) lift(id int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.rows, id)
}

func (st *freezeStore) active() []Freeze {
	st.mu.Lock()
	defer st.mu.Unlock()
	var fs []Freeze
	for _, f := range st.rows {
		fs = append(fs, f)
	}
	return fs
}

// The flow the gateway wires: node A's detector fires, A persists and Puts the
// freeze; node B sees it at its next reload; an early lift on A reaches B the
// same way; and both nodes see it expire without a reload.
func TestFreezeVisibleOnSecondNode(t *testing.T) {
	clock := newManualClock()
	store := &freezeStore{rows: map[int64]Freeze{}}
	window := NewMemoryWindow(clock.Now) // one shared window (RedisWindow in production)
	nodeA, nodeB := NewFreezeSet(clock.Now), NewFreezeSet(clock.Now)
	det := NewDetector(window)

	const token = 77
	for i := 1; i <= 20; i++ {
		n, freeze := reject(t, det, "77", 20)
		if freeze != (i == 20) {
			t.Fatalf("rejection %d: freeze %v", i, freeze)
		}
		if freeze {
			f := Freeze{TokenID: token, Until: clock.Now().Add(10 * time.Minute), Reason: fmt.Sprintf("%d rejections in a minute", n)}
			store.save(f)
			nodeA.Put(f)
		}
	}
	if _, ok := nodeB.Frozen(token); ok {
		t.Fatal("node B frozen before any reload")
	}
	nodeB.Replace(store.active())
	if _, ok := nodeB.Frozen(token); !ok {
		t.Fatal("node B does not honour the freeze after a reload")
	}

	store.lift(token)
	nodeA.Replace(store.active())
	nodeB.Replace(store.active())
	if _, okA := nodeA.Frozen(token); okA {
		t.Fatal("node A still frozen after an admin lift")
	}
	if _, okB := nodeB.Frozen(token); okB {
		t.Fatal("node B still frozen after an admin lift and reload")
	}

	f := Freeze{TokenID: token, Until: clock.Now().Add(10 * time.Minute)}
	store.save(f)
	nodeA.Put(f)
	nodeB.Replace(store.active())
	clock.Advance(10 * time.Minute)
	_, okA := nodeA.Frozen(token)
	_, okB := nodeB.Frozen(token)
	if okA || okB {
		t.Fatalf("frozen after expiry: node A %v, node B %v", okA, okB)
	}
}

func TestValueScorerRules(t *testing.T) {
	cases := []struct {
		name   string
		prompt string
		base   int64
		want   int64
	}{
		{"ordinary", "Explain how a token bucket rate limiter works, in simple terms.", 1, 1},
		{"short but not tiny", "Hi there you", 1, 1},
		{"tiny", "hi", 1, 2},
		{"tiny despite spaces", "  h i   t  ", 1, 2},
		{"empty", "", 1, 2},
		{"seven chars", "abcdefg", 1, 2},
		{"eight chars", "abcdefgh", 1, 1},
		{"one letter repeated", strings.Repeat("a", 500), 1, 2},
		{"one word repeated", strings.Repeat("test ", 40), 1, 2},
		{"19 repeated chars are judged tiny-or-not only", strings.Repeat("z", 19), 1, 1},
		{"non-Latin text is diverse", "Объясните, как работает ограничитель скорости на основе ведра токенов.", 1, 1},
		{"base weight kept", "Summarise this quarterly report for the board, please.", 3, 3},
		{"capped", "hi", 5, 5},
		{"base above cap untouched", "hi", 7, 7},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewValueScorer(DefaultValueRules(), newManualClock().Now)
			if got := v.Weight(fmt.Sprint("tok", i), promptOf(tc.prompt), tc.base); got != tc.want {
				t.Fatalf("Weight(%q, base %d) = %d, want %d", tc.prompt, tc.base, got, tc.want)
			}
		})
	}
}

func TestValueScorerRepeats(t *testing.T) {
	clock := newManualClock()
	v := NewValueScorer(DefaultValueRules(), clock.Now)
	const q = "What is the capital of France?"
	if w := v.Weight("a", promptOf(q), 1); w != 1 {
		t.Fatalf("first time: weight %d, want 1", w)
	}
	if w := v.Weight("a", promptOf(q), 1); w != 3 {
		t.Fatalf("repeat: weight %d, want 3", w)
	}
	if w := v.Weight("a", promptOf("  WHAT is the capital   of France? 2 "), 1); w != 3 {
		t.Fatalf("near-identical (case, spaces, digits): weight %d, want 3", w)
	}
	if w := v.Weight("b", promptOf(q), 1); w != 1 {
		t.Fatalf("another token's first time: weight %d, want 1 (history is per token)", w)
	}
	if w := v.Weight("a", promptOf("ok"), 1); w != 2 {
		t.Fatalf("tiny: weight %d, want 2", w)
	}
	if w := v.Weight("a", promptOf("ok"), 1); w != 4 {
		t.Fatalf("tiny repeat: weight %d, want 4 (1 + tiny 1 + repeat 2)", w)
	}

	clock.Advance(5 * time.Minute)
	if w := v.Weight("a", promptOf(q), 1); w != 1 {
		t.Fatalf("5 minutes later: weight %d, want 1 (outside the repeat window)", w)
	}

	// Only the last 8 prompts are remembered.
	for i := range 8 {
		v.Weight("a", promptOf(fmt.Sprintf("Tell me something new about topic %c", 'a'+i)), 1)
	}
	if w := v.Weight("a", promptOf(q), 1); w != 1 {
		t.Fatalf("9 prompts later: weight %d, want 1", w)
	}

	shape := promptOf(q)
	if allocs := testing.AllocsPerRun(100, func() { v.Weight("a", shape, 1) }); allocs != 0 {
		t.Fatalf("Weight allocates %v times per call for a known token", allocs)
	}
}

func TestValueScorerRulesCanBeDisabled(t *testing.T) {
	v := NewValueScorer(ValueRules{}, nil)
	for range 3 {
		if w := v.Weight("t", promptOf("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 1); w != 1 {
			t.Fatalf("zero rules: weight %d, want 1", w)
		}
	}
	if n := len(v.stripes[stripeOf("t", scorerStripes)].tokens); n != 0 {
		t.Fatalf("no repeat window, yet %d histories kept", n)
	}
}

func TestValueScorerEvictsIdleTokens(t *testing.T) {
	clock := newManualClock()
	v := NewValueScorer(DefaultValueRules(), clock.Now)
	const n = 20000
	for i := range n {
		v.Weight(fmt.Sprint("old", i), promptOf("Explain GCRA in two sentences."), 1)
	}
	clock.Advance(6 * time.Minute)
	for i := range n {
		v.Weight(fmt.Sprint("new", i), promptOf("Explain GCRA in two sentences."), 1)
	}
	total := 0
	for i := range v.stripes {
		total += len(v.stripes[i].tokens)
	}
	if total >= n*3/2 {
		t.Fatalf("%d histories kept after %d tokens went idle; idle tokens are not evicted", total, n)
	}
}

func TestValueScorerConcurrent(t *testing.T) {
	v := NewValueScorer(DefaultValueRules(), nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				v.Weight(fmt.Sprint("tok", i%5), promptOf(fmt.Sprint("prompt number ", g, " of the batch")), 1)
			}
		})
	}
	wg.Wait()
}

// promptOf is the shape of a one-message prompt.
func promptOf(text string) *PromptShape {
	var p PromptShape
	p.AddText([]byte(text))
	return &p
}

func TestPromptShapeOfManyTexts(t *testing.T) {
	// The diversity sample runs across texts, and ShapeOf is the old
	// whole-text rules text by text.
	var p PromptShape
	p.AddText([]byte("aaaaaaaaaa"))
	p.AddText([]byte("  B" + strings.Repeat("b", 76)))
	if p.chars != 87 || p.sampled != 64 || p.distinct != 2 {
		t.Fatalf("shape %+v, want 87 characters, 64 sampled, 2 distinct", p)
	}
	if !p.Sampled() {
		t.Fatal("a full sample is not Sampled")
	}
	a, b := ShapeOf([]byte("  WHAT is the capital   of France? 2 ")), ShapeOf([]byte("what is the capital of france?"))
	if a.Print != b.Print || a.Chars != 26 || b.Chars != 25 {
		t.Fatalf("normalised shapes %+v and %+v, want one print (and 26, 25 characters)", a, b)
	}
	if c := ShapeOf([]byte("Объясните")); c.Print != ShapeOf([]byte("объясните")).Print || c.Chars != 9 {
		t.Fatalf("non-ASCII %+v", c)
	}
}
