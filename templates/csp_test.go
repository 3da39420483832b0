package templates

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/csptest"
)

// TestTemplatesKeepToTheCSP reads every template source for what the pages'
// Content-Security-Policy (web.ContentSecurityPolicy) blocks — scripts,
// inline styles, inline event handlers, templ's css and script components —
// so a template cannot rely on something browsers will refuse. Rendered
// pages are checked too, here and for every route in handlers.
func TestTemplatesKeepToTheCSP(t *testing.T) {
	type rule struct {
		what string
		re   *regexp.Regexp
	}
	forbidden := []rule{
		{"a <script> element", regexp.MustCompile(`(?i)<script\b`)},
		{"a <style> element", regexp.MustCompile(`(?i)<style\b`)},
		{"an inline style attribute", regexp.MustCompile(`(?i)\sstyle\s*=`)},
		{"an inline event handler", regexp.MustCompile(`(?i)\son[a-z]+\s*=`)},
		{"a javascript: URL", regexp.MustCompile(`(?i)javascript:`)},
		{"a templ css component (rendered as <style>)", regexp.MustCompile(`(?m)^css\s+\w+\(`)},
		{"a templ script component (rendered as <script>)", regexp.MustCompile(`(?m)^script\s+\w+\(`)},
		{"templ.Raw (unchecked HTML)", regexp.MustCompile(`templ\.Raw\(`)},
	}
	// Go helpers may build attributes (templ.Attributes{"onclick": …}).
	inGo := []rule{
		{"a <script> element", regexp.MustCompile(`(?i)<script\b`)},
		{"a <style> element", regexp.MustCompile(`(?i)<style\b`)},
		{"an inline style attribute", regexp.MustCompile(`(?i)"style"`)},
		{"an inline event handler", regexp.MustCompile(`(?i)"on[a-z]+"`)},
		{"a javascript: URL", regexp.MustCompile(`(?i)javascript:`)},
		{"templ.Raw (unchecked HTML)", regexp.MustCompile(`templ\.Raw\(`)},
	}
	sources, err := filepath.Glob("*.templ")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no templates found: %v", err)
	}
	helpers, _ := filepath.Glob("*.go")
	for _, f := range append(sources, helpers...) {
		rules := forbidden
		switch {
		case strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "_templ.go"):
			continue // generated files follow their .templ; CI checks they are current
		case strings.HasSuffix(f, ".go"):
			rules = inGo
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, fb := range rules {
				if fb.re.MatchString(line) {
					t.Errorf("%s:%d: %s, which the pages' CSP blocks: %s", f, i+1, fb.what, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestRenderedPagesKeepToTheCSP renders the pages and checks the HTML.
func TestRenderedPagesKeepToTheCSP(t *testing.T) {
	pages := everyPage(Page{Title: "CSP", User: admin(), Flash: "saved"})
	pages["tokens with a row"] = Tokens(Page{Title: "Tokens", User: member()}, TokensView{Tokens: []TokenRow{{ID: 1, Name: "ci", Status: "active"}}})
	for name, c := range pages {
		var buf bytes.Buffer
		if err := c.Render(context.Background(), &buf); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := csptest.Violations(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range v {
			t.Errorf("%s: %s", name, problem)
		}
	}
	// The checker itself finds what it must.
	v, _ := csptest.Violations(strings.NewReader(`<p style="x" onclick="y"><script></script><a href="javascript:z">`))
	if len(v) != 4 {
		t.Errorf("the checker found %d problems in a page with four: %q", len(v), v)
	}
}
