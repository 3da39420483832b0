package local

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/chat"
)

func newModel(t testing.TB) *Model {
	t.Helper()
	m, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func user(s string) []chat.Message { return []chat.Message{{Role: "user", Content: s}} }

// parseReplyCouplet splits a couplet answer into its three lines and fails
// the test if the 上联/下联/横批 form is not there.
func parseReplyCouplet(t *testing.T, content string) couplet {
	t.Helper()
	lines := strings.Split(content, "\n")
	if len(lines) < 3 {
		t.Fatalf("want at least 3 lines, got %q", content)
	}
	var c couplet
	for i, f := range []struct {
		prefix string
		dst    *string
	}{{"上联：", &c.upper}, {"下联：", &c.lower}, {"横批：", &c.scroll}} {
		v, ok := strings.CutPrefix(lines[i], f.prefix)
		if !ok || v == "" {
			t.Fatalf("line %d = %q, want prefix %q and text", i+1, lines[i], f.prefix)
		}
		*f.dst = v
	}
	return c
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func inTable(m *Model, c couplet) bool {
	for _, x := range m.couplets {
		if x == c {
			return true
		}
	}
	return false
}

func TestNewParsesEmbeddedTable(t *testing.T) {
	m := newModel(t)
	if got := len(m.couplets); got != 26 {
		t.Errorf("couplets = %d, want 26", got)
	}
	first := couplet{"天增岁月人增寿", "春满乾坤福满门", "四季平安"}
	if m.couplets[0] != first {
		t.Errorf("first couplet = %+v, want %+v", m.couplets[0], first)
	}
	if !strings.HasPrefix(string(coupletsTSV), "# Traditional spring couplets (春联), public domain.") {
		t.Error("embedded table lost its header crediting the couplets as traditional")
	}
}

func TestParseCoupletsRejectsMalformed(t *testing.T) {
	tests := []struct {
		name, data, wantErr string
	}{
		{"empty", "", "no couplets"},
		{"only comments", "# header\n\n# more\n", "no couplets"},
		{"two fields", "天增岁月人增寿\t春满乾坤福满门\n", "line 1: want 3"},
		{"four fields", "# h\n上\t下\t横\t多\n", "line 2: want 3"},
		{"empty field", "天增岁月人增寿\t\t四季平安\n", "field 2 is empty"},
		{"length mismatch", "天增岁月人增寿\t春满乾坤福满\t四季平安\n", "differ in length"},
		{"invalid utf-8", "\xff\t\xfe\t\xfd\n", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseCouplets([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseCouplets(t *testing.T) {
	got, err := parseCouplets([]byte("# c\r\n\r\n一二\t三四\t横批\r\n  \n五六七\t八九十\t再来\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []couplet{{"一二", "三四", "横批"}, {"五六七", "八九十", "再来"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestCompleteIsDeterministic(t *testing.T) {
	prompts := [][]chat.Message{
		user("写一副关于福的春联"),
		user("Write a spring couplet about health"),
		user("What is the capital of France?"),
		nil,
		{{Role: "system", Content: "be terse"}, {Role: "user", Content: "对联 学业"}, {Role: "assistant", Content: "ok"}},
	}
	for _, msgs := range prompts {
		// Separate models too: nothing may depend on per-instance state.
		a := newModel(t).Complete(msgs, 0)
		for range 5 {
			if b := newModel(t).Complete(msgs, 0); b != a {
				t.Fatalf("reply changed for %+v:\n%+v\n%+v", msgs, a, b)
			}
		}
	}
}

func TestCoupletPrompts(t *testing.T) {
	m := newModel(t)
	tests := []struct {
		name      string
		prompt    string
		wantNote  bool     // English note after the couplet
		wantAnyOf []string // the chosen couplet contains one of these; nil for any
	}{
		{"chinese 春联 福", "写一副关于福的春联", false, []string{"福"}},
		{"chinese 对联 学业", "请写一副祝学业进步的对联", false, []string{"步步高", "层楼"}},
		{"chinese 上联", "给我一个上联", false, nil},
		{"chinese 新年 平安", "新年祝家人平安", false, []string{"平安"}},
		{"chinese 春节 财", "春节发财", false, []string{"财"}},
		{"english couplet health", "Write a couplet about health and long life", true, []string{"寿", "康"}},
		{"english spring festival wealth", "Something for the Spring Festival, wishing wealth", true, []string{"财", "富"}},
		{"english uppercase", "COUPLET PLEASE", true, nil},
		{"english chinese new year", "A Chinese New Year greeting for my family", true, []string{"家", "门", "户"}},
		{"english study", "a couplet for a student before exams", true, []string{"步步高", "层楼"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := m.Complete(user(tt.prompt), 0)
			c := parseReplyCouplet(t, r.Content)
			if !inTable(m, c) {
				t.Fatalf("couplet %+v is not from the table", c)
			}
			if tt.wantAnyOf != nil && !containsAny(c.text(), tt.wantAnyOf) {
				t.Errorf("couplet %+v contains none of %q", c, tt.wantAnyOf)
			}
			note := strings.Contains(r.Content, "This is a traditional Chinese spring couplet")
			if note != tt.wantNote {
				t.Errorf("English note present = %v, want %v; content %q", note, tt.wantNote, r.Content)
			}
			if !tt.wantNote && strings.Count(r.Content, "\n") != 2 {
				t.Errorf("Chinese answer should be exactly three lines, got %q", r.Content)
			}
			if r.FinishReason != "stop" {
				t.Errorf("FinishReason = %q, want stop", r.FinishReason)
			}
		})
	}
}

func TestEnglishNoteNamesTheme(t *testing.T) {
	m := newModel(t)
	r := m.Complete(user("a couplet about good fortune"), 0)
	if !strings.HasSuffix(r.Content, "chosen for the theme of good fortune.") {
		t.Errorf("content = %q, want theme named in note", r.Content)
	}
}

func TestThemesPickDifferentCouplets(t *testing.T) {
	m := newModel(t)
	pick := func(prompt string) couplet {
		t.Helper()
		return parseReplyCouplet(t, m.Complete(user(prompt), 0).Content)
	}
	pairs := [][2]string{
		{"写一副关于福的春联", "写一副关于学业的春联"},
		{"a couplet about blessings", "a couplet for studies"},
		{"春联：平安", "春联：发财"},
		{"couplet about health", "couplet about harvest"},
	}
	for _, p := range pairs {
		if a, b := pick(p[0]), pick(p[1]); a == b {
			t.Errorf("%q and %q both chose %+v", p[0], p[1], a)
		}
	}
	// With no theme at all, the prompt hash still spreads choices around.
	seen := map[couplet]bool{}
	for _, p := range []string{"couplet", "couplet please", "a couplet", "one couplet", "couplet!", "对联", "春联", "写春联"} {
		seen[pick(p)] = true
	}
	if len(seen) < 3 {
		t.Errorf("8 theme-less prompts chose only %d distinct couplets", len(seen))
	}
}

func TestNonCoupletPrompts(t *testing.T) {
	m := newModel(t)
	tests := []struct {
		name    string
		msgs    []chat.Message
		want    []string
		notWant []string
	}{
		{
			name: "english question echoes topic",
			msgs: user("What is the capital of France?"),
			want: []string{`You asked about "What is the capital of France".`, "Connect an upstream provider"},
		},
		{
			name: "chinese question answers in chinese",
			msgs: user("今天天气怎么样？"),
			want: []string{"你问的是“今天天气怎么样”。", "上游"},
		},
		{
			name:    "last user message wins",
			msgs:    []chat.Message{{Role: "user", Content: "写春联"}, {Role: "assistant", Content: "上联：…"}, {Role: "user", Content: "tell me about Go"}},
			want:    []string{`"tell me about Go"`},
			notWant: []string{"上联："},
		},
		{
			name: "whitespace and control characters tidied",
			msgs: user("  hello\n\n\tthere\x00 ??"),
			want: []string{`You asked about "hello there".`},
		},
		{
			name: "long prompt is shortened",
			msgs: user(strings.Repeat("word ", 100)),
			want: []string{"…\"."},
		},
		{
			name:    "no messages",
			msgs:    nil,
			want:    []string{"Hello! sluice-local"},
			notWant: []string{"You asked about"},
		},
		{
			name: "no user message",
			msgs: []chat.Message{{Role: "system", Content: "写春联"}, {Role: "assistant", Content: "hi"}},
			want: []string{"Hello! sluice-local"},
		},
		{
			name: "empty user message",
			msgs: user("   "),
			want: []string{"Hello! sluice-local"},
		},
		{
			name: "role matched leniently",
			msgs: []chat.Message{{Role: " User ", Content: "ping"}},
			want: []string{`"ping"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := m.Complete(tt.msgs, 0)
			for _, w := range tt.want {
				if !strings.Contains(r.Content, w) {
					t.Errorf("content %q does not contain %q", r.Content, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(r.Content, w) {
					t.Errorf("content %q contains %q", r.Content, w)
				}
			}
			if r.FinishReason != "stop" {
				t.Errorf("FinishReason = %q, want stop", r.FinishReason)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	m := newModel(t)
	tests := []struct {
		name string
		msgs []chat.Message
	}{
		{"none", nil},
		{"one", user("写一副关于福的春联")},
		{"three", []chat.Message{{Role: "system", Content: "You are helpful."}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: ""}}},
		{"english couplet", user("Write a couplet about spring")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := m.Complete(tt.msgs, 0)
			wantPrompt := 0
			for _, msg := range tt.msgs {
				wantPrompt += chat.CountTokens(msg.Content) + 4
			}
			if r.PromptTokens != wantPrompt {
				t.Errorf("PromptTokens = %d, want %d", r.PromptTokens, wantPrompt)
			}
			if got := chat.CountTokens(r.Content); r.CompletionTokens != got || got == 0 {
				t.Errorf("CompletionTokens = %d, chat.CountTokens(content) = %d", r.CompletionTokens, got)
			}
		})
	}
	// A worked example, so the rule is pinned down and not just restated.
	r := m.Complete([]chat.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "写春联"}}, 0)
	if r.PromptTokens != (3+4)+(3+4) { // "be brief" = 1 + ceil(5/4)
		t.Errorf("PromptTokens = %d, want 14", r.PromptTokens)
	}
	// A Chinese couplet answer: 3 labels of 2 Han + colon, 2 newlines (free).
	c := parseReplyCouplet(t, r.Content)
	want := 9 + utf8.RuneCountInString(c.text())
	if r.CompletionTokens != want {
		t.Errorf("CompletionTokens = %d, want %d", r.CompletionTokens, want)
	}
}

func TestMaxTokensTruncation(t *testing.T) {
	m := newModel(t)
	full := m.Complete(user("Write a couplet about spring"), 0)
	tests := []struct {
		name       string
		prompt     string
		maxTokens  int
		wantFinish string
	}{
		{"one token", "Write a couplet about spring", 1, "length"},
		{"mid couplet", "Write a couplet about spring", 7, "length"},
		{"one short", "Write a couplet about spring", full.CompletionTokens - 1, "length"},
		{"exact", "Write a couplet about spring", full.CompletionTokens, "stop"},
		{"generous", "Write a couplet about spring", 10000, "stop"},
		{"no limit", "Write a couplet about spring", 0, "stop"},
		{"negative is no limit", "Write a couplet about spring", -3, "stop"},
		{"english words", "what is a monad", 5, "length"},
		{"chinese reply", "今天天气怎么样", 12, "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := m.Complete(user(tt.prompt), 0).Content
			r := m.Complete(user(tt.prompt), tt.maxTokens)
			if r.FinishReason != tt.wantFinish {
				t.Fatalf("FinishReason = %q, want %q", r.FinishReason, tt.wantFinish)
			}
			if !strings.HasPrefix(whole, r.Content) || !utf8.ValidString(r.Content) {
				t.Fatalf("content %q is not a valid prefix of %q", r.Content, whole)
			}
			if r.CompletionTokens != chat.CountTokens(r.Content) {
				t.Errorf("CompletionTokens = %d, CountTokens = %d", r.CompletionTokens, chat.CountTokens(r.Content))
			}
			if tt.maxTokens > 0 && r.CompletionTokens > tt.maxTokens {
				t.Errorf("CompletionTokens = %d > maxTokens %d", r.CompletionTokens, tt.maxTokens)
			}
			if tt.wantFinish == "length" && r.CompletionTokens != tt.maxTokens {
				// Every rune costs at most one token, so a cut reply uses
				// the whole budget.
				t.Errorf("cut reply uses %d of %d tokens", r.CompletionTokens, tt.maxTokens)
			}
			if tt.wantFinish == "stop" && r.Content != whole {
				t.Errorf("content was cut although FinishReason is stop")
			}
		})
	}
	if r := m.Complete(user("写一副关于福的春联"), 3); r.Content != "上联：" {
		t.Errorf("3-token couplet = %q, want %q", r.Content, "上联：")
	}
}

func TestOddInputNeverPanics(t *testing.T) {
	m := newModel(t)
	inputs := [][]chat.Message{
		nil,
		{},
		{{}},
		{{Role: "user"}},
		{{Role: "user", Content: "\xff\xfe couplet \xff"}},
		{{Role: "user", Content: "春联\x00\x01"}},
		{{Role: "user", Content: "？！。"}},
		{{Role: "USER", Content: strings.Repeat("福", 10000) + "春联"}},
		{{Role: "tool", Content: "couplet"}},
	}
	for _, msgs := range inputs {
		for _, max := range []int{-1, 0, 1, 2, 50} {
			r := m.Complete(msgs, max)
			if r.Content == "" || !utf8.ValidString(r.Content) {
				t.Errorf("Complete(%q, %d) content = %q", msgs, max, r.Content)
			}
		}
	}
	// Zero and nil models are misuse, but must still answer, not panic.
	var zero Model
	if r := zero.Complete(user("春联"), 0); r.Content == "" {
		t.Error("zero Model gave empty reply")
	}
	var nilModel *Model
	if r := nilModel.Complete(user("couplet"), 0); r.Content == "" {
		t.Error("nil Model gave empty reply")
	}
}

func FuzzComplete(f *testing.F) {
	f.Add("写一副关于福的春联", 0)
	f.Add("Write a couplet about health", 5)
	f.Add("What is Go?", 3)
	f.Add("", 1)
	f.Add("\xff\xfe对联", -1)
	m := newModel(f)
	f.Fuzz(func(t *testing.T, prompt string, maxTokens int) {
		msgs := []chat.Message{{Role: "system", Content: prompt}, {Role: "user", Content: prompt}}
		r := m.Complete(msgs, maxTokens)
		if r.Content == "" || !utf8.ValidString(r.Content) {
			t.Fatalf("content = %q", r.Content)
		}
		if r.CompletionTokens != chat.CountTokens(r.Content) {
			t.Fatalf("CompletionTokens = %d, CountTokens = %d", r.CompletionTokens, chat.CountTokens(r.Content))
		}
		if maxTokens > 0 && r.CompletionTokens > maxTokens {
			t.Fatalf("CompletionTokens = %d > maxTokens %d", r.CompletionTokens, maxTokens)
		}
		if r.PromptTokens != 2*chat.CountTokens(prompt)+8 {
			t.Fatalf("PromptTokens = %d", r.PromptTokens)
		}
		if r.FinishReason != "stop" && r.FinishReason != "length" {
			t.Fatalf("FinishReason = %q", r.FinishReason)
		}
		if again := m.Complete(msgs, maxTokens); again != r {
			t.Fatalf("not deterministic: %+v vs %+v", r, again)
		}
	})
}
