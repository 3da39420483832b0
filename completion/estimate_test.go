package completion_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/upstream/mock"
)

// servesAll is a provider pool serving every model, never called.
type servesAll struct{ servesGPT }

func (servesAll) Serves(string) bool { return true }

// corpusRequests are chat requests over the texts of testdata/corpus
// (English prose, Go code, Chinese, JSON) and with tools, tool calls,
// tool results, a response schema and an inline image: what the estimate
// must count as a provider bills it.
func corpusRequests(t *testing.T) map[string]string {
	texts := map[string]string{}
	files, _ := filepath.Glob("testdata/corpus/*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[filepath.Base(f)] = strings.ToValidUTF8(string(b), "")
	}
	if len(texts) < 6 {
		t.Fatalf("corpus: %d files", len(texts))
	}
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	reqs := map[string]string{}
	for name, text := range texts {
		reqs[name] = `{"model":"MODEL","messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":` + str(text) + `}]}`
		// The same text cut into a conversation of short turns: framing
		// is a larger share of the count.
		var turns []string
		for i, line := range strings.Split(text, "\n") {
			if strings.TrimSpace(line) == "" || i > 60 {
				continue
			}
			role := []string{"user", "assistant"}[len(turns)%2]
			turns = append(turns, `{"role":"`+role+`","content":`+str(line)+`}`)
		}
		reqs[name+" as turns"] = `{"model":"MODEL","messages":[` + strings.Join(turns, ",") + `]}`
	}
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a given city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"The city, e.g. Paris"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}}},` +
		`{"type":"function","function":{"name":"search_orders","description":"Find a customer's orders by status and date range.","parameters":{"type":"object","properties":{"customer_id":{"type":"string","description":"The customer's id"},"status":{"type":"string","enum":["open","shipped","returned"]},"since":{"type":"string","description":"ISO date"}}}}}]`
	reqs["tools and a tool round"] = `{"model":"MODEL","tools":` + tools + `,"messages":[{"role":"user","content":"What is the weather in Paris, and my open orders?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"celsius\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"{\"temperature\":18,\"sky\":\"cloudy\",\"wind_kmh\":12}"}]}`
	reqs["a response schema"] = `{"model":"MODEL","response_format":{"type":"json_schema","json_schema":{"name":"invoice","schema":{"type":"object","properties":{"total":{"type":"number"},"lines":{"type":"array","items":{"type":"string"}}},"required":["total"]}}},` +
		`"messages":[{"role":"user","content":` + str(texts["prose.md"][:2000]) + `}]}`
	var img bytes.Buffer
	_ = png.Encode(base64.NewEncoder(base64.StdEncoding, &img), image.NewGray(image.Rect(0, 0, 1200, 900)))
	reqs["an inline image"] = `{"model":"MODEL","messages":[{"role":"user","content":[{"type":"text","text":"What does this chart show?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img.String() + `"}}]}]}`
	return reqs
}

// TestTheReservationIsNeverBelowTheBill: for each tokenizer Sluice has,
// over the corpus, the prompt estimate is never below what the provider
// bills (the mock's cookbook count with tiktoken-go, an implementation of
// its own) and on average no more than 1.5 times it.
func TestTheReservationIsNeverBelowTheBill(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesAll{}})
	reqs := corpusRequests(t)
	for _, tc := range []struct{ model, encoding string }{{"gpt-4o", "o200k_base"}, {"gpt-4-turbo", "cl100k_base"}} {
		t.Run(tc.encoding, func(t *testing.T) {
			var ratios float64
			for name, body := range reqs {
				body := []byte(strings.Replace(body, "MODEL", tc.model, 1))
				req, err := p.Parse(body)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				billed, err := mock.PromptTokens(body, tc.encoding)
				if err != nil || billed == 0 {
					t.Fatalf("%s: the reference billed %d (%v)", name, billed, err)
				}
				if req.Prompt.Family.Name != tc.encoding {
					t.Fatalf("%s: counted with %s", tc.model, req.Prompt.Family.Name)
				}
				ratio := float64(req.Prompt.Tokens) / float64(billed)
				t.Logf("%-24s estimate %6d, billed %6d, %.3fx", name, req.Prompt.Tokens, billed, ratio)
				if req.Prompt.Tokens < int64(billed) {
					t.Errorf("%s: estimate %d below the bill %d", name, req.Prompt.Tokens, billed)
				}
				ratios += ratio
			}
			if mean := ratios / float64(len(reqs)); mean > 1.5 {
				t.Errorf("the estimate is on average %.3fx the bill, want at most 1.5x", mean)
			} else {
				t.Logf("on average %.3fx the bill over %d requests", mean, len(reqs))
			}
		})
	}
}

// BenchmarkEstimate is the one walk and count of a request of 1, 10 and
// 100 KB of code in turns of 2 KB: fresh (every text new to the node, so
// counted) and again (the same body, its long texts counted before, as a
// coding agent resends its conversation).
func BenchmarkEstimate(b *testing.B) {
	code, err := os.ReadFile("testdata/corpus/code.go.txt")
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 10, 10 << 10, 100 << 10} {
		var turns []string
		for n := 0; n < size; {
			s, _ := json.Marshal(fmt.Sprintf("%08d ", len(turns)) + string(code[:min(len(code), size-n, 2000)]))
			turns = append(turns, `{"role":"user","content":`+string(s)+`}`)
			n += len(s) + 30
		}
		body := []byte(`{"model":"gpt-4o","max_tokens":256,"messages":[` + strings.Join(turns, ",") + `]}`)
		for _, again := range []bool{false, true} {
			name := fmt.Sprintf("%dKB/fresh", size>>10)
			if again {
				name = fmt.Sprintf("%dKB/again", size>>10)
			}
			b.Run(name, func(b *testing.B) {
				p := completion.New(completion.Deps{Providers: servesAll{}})
				if _, err := p.Parse([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"load the tokenizer"}]}`)); err != nil {
					b.Fatal(err)
				}
				fresh := bytes.Clone(body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if !again { // a new first line for every text: none counted before
						for at, j := 0, 0; ; j++ {
							k := bytes.Index(fresh[at:], []byte(`"content":"`))
							if k < 0 {
								break
							}
							at += k + len(`"content":"`)
							copy(fresh[at:at+4], fmt.Sprintf("%04d", i%10000))
						}
					}
					if _, err := p.Parse(fresh); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestPartsSluiceCannotPriceAreNeverFree: an audio or file part, or a part
// of a type Sluice does not know, counts at least as its JSON, and is
// named for the refusal a limit that relies on the estimate makes.
func TestPartsSluiceCannotPriceAreNeverFree(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesAll{}})
	const text = `{"type":"text","text":"listen"}`
	plain, err := p.Parse([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":[` + text + `]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{
		`{"type":"input_audio","input_audio":{"data":"` + strings.Repeat("UklGRiQAAABXQVZF", 64) + `","format":"wav"}}`,
		`{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0xLjQK","filename":"a.pdf"}}`,
		`{"type":"hologram","hologram":{"id":"h1"}}`,
	} {
		req, err := p.Parse([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":[` + text + `,` + part + `]}]}`))
		if err != nil {
			t.Fatalf("%s: %v", part, err)
		}
		if extra := req.Prompt.Tokens - plain.Prompt.Tokens; extra < int64(len(part)/8) {
			t.Errorf("%s counted %d tokens", part, extra)
		}
		if req.Prompt.Unbounded != "messages[0].content[1]" || req.Prompt.UnboundedType == "" {
			t.Errorf("%s: unbounded %q (%q), want it named", part, req.Prompt.Unbounded, req.Prompt.UnboundedType)
		}
	}
}

// TestTheThinkingOfAToolCycleIsCounted: the thinking_blocks of the
// assistant turns after the last user message (a tool-use cycle still
// going on, whose thinking Anthropic bills as input) count in the
// estimate; those of turns before it, which Anthropic strips, do not.
func TestTheThinkingOfAToolCycleIsCounted(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesAll{}})
	thinking := strings.Repeat("The user wants the weather in Paris, so I call the tool and then read its answer. ", 60)
	blocks := `[{"type":"thinking","thinking":"` + thinking + `","signature":"EqQBCkYIARgCKkA"}]`
	assistant := func(withThinking bool) string {
		m := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]`
		if withThinking {
			m += `,"thinking_blocks":` + blocks
		}
		return m + `}`
	}
	const user, tool = `{"role":"user","content":"Weather in Paris?"}`, `{"role":"tool","tool_call_id":"call_1","content":"18C"}`
	estimate := func(msgs ...string) int64 {
		t.Helper()
		req, err := p.Parse([]byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[` + strings.Join(msgs, ",") + `]}`))
		if err != nil {
			t.Fatalf("%v", err)
		}
		return req.Prompt.Tokens
	}
	req, err := p.Parse([]byte(`{"model":"claude-sonnet-4-5","messages":[` + user + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	words := int64(req.Prompt.Family.Counter.Count([]byte(thinking)))

	plain := estimate(user, assistant(false), tool)
	if got := estimate(user, assistant(true), tool); got < plain+words {
		t.Errorf("a cycle's thinking: estimate %d, want at least %d + its %d tokens", got, plain, words)
	}
	// Two turns of one cycle: both count.
	if got, once := estimate(user, assistant(true), tool, assistant(true), tool), estimate(user, assistant(false), tool, assistant(false), tool); got < once+2*words {
		t.Errorf("two turns of a cycle: estimate %d, want at least %d + 2 × %d", got, once, words)
	}
	// A user turn ends the cycle: the thinking before it is not billed.
	const answer = `{"role":"assistant","content":"18C in Paris."}`
	earlier, without := estimate(user, assistant(true), tool, answer, user), estimate(user, assistant(false), tool, answer, user)
	if earlier != without {
		t.Errorf("thinking before the last user turn: estimate %d, want %d as without it", earlier, without)
	}
	// A user message right after the tool results is Anthropic's user turn
	// of tool_result and text blocks: still the cycle, counted.
	if got, plainToo := estimate(user, assistant(true), tool, user), estimate(user, assistant(false), tool, user); got < plainToo+words {
		t.Errorf("a user message after tool results: estimate %d, want at least %d + %d", got, plainToo, words)
	}
	if got := estimate(user, strings.Replace(assistant(false), `}]`, `}],"thinking_blocks":null`, 1), tool); got != plain {
		t.Errorf("null thinking_blocks: estimate %d, want %d", got, plain)
	}
	// Given twice, a parser could read either: refused, not guessed.
	_, err = p.Parse([]byte(`{"model":"claude-sonnet-4-5","messages":[` + user + `,` +
		strings.Replace(assistant(true), `"thinking_blocks":`, `"thinking_blocks":[],"thinking_blocks":`, 1) + `,` + tool + `]}`))
	if err == nil || !strings.Contains(err.Error(), "'messages[1].thinking_blocks' is given twice") {
		t.Errorf("thinking_blocks given twice: %v", err)
	}
}

// TestAnthropicsToolPromptIsCounted: Anthropic adds a tool-use system
// prompt (346 tokens) to a request that offers tools, and bills it as
// input; the estimate for a Claude model counts it, once however many
// tools, and OpenAI's models, whose providers add none, do not.
func TestAnthropicsToolPromptIsCounted(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesAll{}})
	const tool = `{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}`
	estimate := func(model, tools string) int64 {
		t.Helper()
		body := `{"model":"` + model + `","max_tokens":1,"messages":[{"role":"user","content":"hi"}]`
		if tools != "" {
			body += `,"tools":[` + tools + `]`
		}
		req, err := p.Parse([]byte(body + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return req.Prompt.Tokens
	}
	for _, tc := range []struct {
		model  string
		prompt int64
	}{{"claude-sonnet-4-5", 346}, {"claude-3-5-haiku-latest", 346}, {"gpt-4o", 0}} {
		bare, one, two := estimate(tc.model, ""), estimate(tc.model, tool), estimate(tc.model, tool+","+tool)
		toolJSON := two - one // one more tool: its JSON and overhead, no second prompt
		if got := one - bare - toolJSON; got < tc.prompt || got > tc.prompt+toolJSON {
			t.Errorf("%s: a tool adds %d tokens beyond its own %d, want the provider's tool prompt (%d)", tc.model, one-bare-toolJSON, toolJSON, tc.prompt)
		}
	}
}
