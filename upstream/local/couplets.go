package local

import (
	_ "embed"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// coupletsTSV is the project's own copy of the traditional couplets, embedded
// so the binary answers offline with no data directory to deploy.
//
//go:embed couplets.tsv
var coupletsTSV []byte

// couplet is one traditional spring couplet.
type couplet struct {
	upper  string // 上联
	lower  string // 下联
	scroll string // 横批
}

// text is everything a reader sees of the couplet; themes are scored on it.
func (c couplet) text() string { return c.upper + c.lower + c.scroll }

// parseCouplets reads tab-separated lines of upper line, lower line and
// horizontal scroll, skipping blank lines and # comments. It rejects anything
// else rather than guessing, because a bad row would otherwise surface as a
// garbled answer to a user long after deploy.
func parseCouplets(data []byte) ([]couplet, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("couplets: not valid UTF-8")
	}
	var out []couplet
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			return nil, fmt.Errorf("couplets: line %d: want 3 tab-separated fields, got %d", n+1, len(fields))
		}
		for i, f := range fields {
			fields[i] = strings.TrimSpace(f)
			if fields[i] == "" {
				return nil, fmt.Errorf("couplets: line %d: field %d is empty", n+1, i+1)
			}
		}
		// The two lines of a couplet always match in length; a mismatch
		// means the columns were shifted or a line was mistyped.
		if utf8.RuneCountInString(fields[0]) != utf8.RuneCountInString(fields[1]) {
			return nil, fmt.Errorf("couplets: line %d: upper and lower lines differ in length", n+1)
		}
		out = append(out, couplet{upper: fields[0], lower: fields[1], scroll: fields[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("couplets: no couplets found")
	}
	return out, nil
}

// requestPhrases returns the lower-case phrases that mark a prompt as asking
// for a couplet. They are removed from the prompt before theme matching, so
// that asking for a 春联 does not by itself count as asking for a
// spring-themed one. Longer phrases come first so that they are removed whole.
// It is a function rather than a package variable so the list cannot be
// changed at run time.
func requestPhrases() []string {
	return []string{
		"chinese new year", "lunar new year", "new year", "spring festival",
		"spring couplets", "spring couplet", "couplets", "couplet",
		"chunlian", "duilian",
		"春联", "对联", "上联", "下联", "横批", "春节", "新年", "过年", "拜年", "春贴", "门对",
	}
}

// fillerHan are Han characters of the request itself ("请帮我写一副关于…的")
// that would otherwise match couplets by accident.
const fillerHan = "请帮我给写来副个首张的关于吧呢吗啊要想一对联些"

// theme links words a user might use to the characters couplets use for the
// same wish, so that "health" or 健康 finds a couplet with 寿 or 康.
type theme struct {
	name     string   // English name, used in the English note
	triggers []string // lower-case; Han matched anywhere, English at word starts
	markers  []string // counted in the couplet text
}

// themes returns the read-only theme table; it is built per Model (not kept in a
// package variable) so nothing at package level can be changed at run time.
// The table has no couplet about studies as such, so the study theme leans
// on the traditional wishes for advancement (步步高, 更上一层楼, 高升).
func themes() []theme {
	return []theme{
		{"good fortune", []string{"福", "吉祥", "好运", "运气", "fortune", "bless", "luck", "auspicious"}, []string{"福", "祥", "吉", "瑞"}},
		{"spring", []string{"春", "花", "spring", "flower", "blossom"}, []string{"春", "花", "梅", "红"}},
		{"wealth", []string{"财", "富", "钱", "发财", "生意", "wealth", "money", "rich", "prosper", "business"}, []string{"财", "富", "金", "旺", "余"}},
		{"peace and safety", []string{"平安", "安", "safe", "peace", "calm"}, []string{"安", "顺"}},
		{"health and long life", []string{"健康", "寿", "长寿", "康", "health", "longevity", "long life", "well-being"}, []string{"寿", "康"}},
		{"success in studies", []string{"学", "考", "读书", "study", "studies", "school", "exam", "student", "learn", "education", "homework"}, []string{"步步高", "层楼", "高升", "勤"}},
		{"career", []string{"事业", "工作", "升职", "career", "job", "work", "promotion"}, []string{"事业", "兴", "高升"}},
		{"family", []string{"家", "family", "home", "household"}, []string{"家", "门", "户"}},
		{"joy", []string{"喜", "乐", "happy", "happiness", "joy"}, []string{"喜", "欢"}},
		{"harvest", []string{"丰收", "农", "harvest", "farm"}, []string{"丰", "耕", "收"}},
		{"a fresh start", []string{"新", "fresh", "renew", "change"}, []string{"新", "更"}},
	}
}

// isCoupletRequest reports whether the prompt contains one of the request
// phrases, ignoring case.
func isCoupletRequest(phrases []string, prompt string) bool {
	p := strings.ToLower(prompt)
	for _, w := range phrases {
		if strings.Contains(p, w) {
			return true
		}
	}
	return false
}

// themeText is the lower-cased prompt with the request phrases blanked out,
// leaving only what the couplet should be about.
func themeText(phrases []string, prompt string) string {
	p := strings.ToLower(prompt)
	for _, w := range phrases {
		p = strings.ReplaceAll(p, w, " ")
	}
	return p
}

// matchThemes returns the themes whose triggers occur in the theme text.
// English triggers must start a word, so "rich" matches "riches" but
// "work" does not match "network".
func matchThemes(all []theme, text string) []theme {
	words := " " + strings.Join(strings.FieldsFunc(text, func(r rune) bool {
		return !(isASCIIAlnum(r) || r == '-')
	}), " ")
	var out []theme
	for _, t := range all {
		for _, trig := range t.triggers {
			if containsHan(trig) && strings.Contains(text, trig) ||
				!containsHan(trig) && strings.Contains(words, " "+trig) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// pickCouplet chooses the couplet that best fits the prompt. The score is
// the number of distinct Han characters it shares with the prompt, plus two
// for each two-character word of the prompt it contains verbatim (平安 is
// worth more than 平 and 安 apart), plus two for each occurrence of a matched
// theme's marker; so Chinese prompts match on their own words and English
// prompts through themes. Ties, including the
// all-zero tie of a prompt with no theme, are broken by a hash of the prompt:
// the answer stays deterministic while different prompts get different
// couplets.
func pickCouplet(all []couplet, matched []theme, text, prompt string) couplet {
	promptHan := map[rune]bool{}
	promptPairs := map[string]bool{}
	prev := rune(0)
	for _, r := range text {
		if !unicode.Is(unicode.Han, r) {
			prev = 0
			continue
		}
		if !strings.ContainsRune(fillerHan, r) {
			promptHan[r] = true
		}
		if prev != 0 {
			promptPairs[string([]rune{prev, r})] = true
		}
		prev = r
	}
	best, bestScore := []int(nil), -1
	for i, c := range all {
		ct := c.text()
		score := 0
		for r := range promptHan {
			if strings.ContainsRune(ct, r) {
				score++
			}
		}
		for p := range promptPairs {
			if strings.Contains(ct, p) {
				score += 2
			}
		}
		for _, t := range matched {
			for _, m := range t.markers {
				score += 2 * strings.Count(ct, m)
			}
		}
		switch {
		case score > bestScore:
			best, bestScore = []int{i}, score
		case score == bestScore:
			best = append(best, i)
		}
	}
	h := fnv.New32a()
	h.Write([]byte(prompt))
	return all[best[h.Sum32()%uint32(len(best))]]
}

func containsHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}
