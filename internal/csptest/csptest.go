// Package csptest checks HTML against the pages' Content-Security-Policy
// (web.ContentSecurityPolicy): no scripts, no inline styles or event
// handlers, stylesheets only from /static/. A browser would block what it
// finds, so a page relying on it would silently break.
package csptest

import (
	"fmt"
	"io"
	"strings"

	"github.com/PuerkitoBio/goquery"
)

// Violations lists what in the HTML document the policy would block.
func Violations(r io.Reader) ([]string, error) {
	doc, err := goquery.NewDocumentFromReader(r)
	if err != nil {
		return nil, err
	}
	var out []string
	doc.Find("script, style").Each(func(_ int, s *goquery.Selection) {
		out = append(out, "a <"+goquery.NodeName(s)+"> element")
	})
	doc.Find("*").Each(func(_ int, s *goquery.Selection) {
		el := goquery.NodeName(s)
		for _, a := range s.Nodes[0].Attr {
			name, val := strings.ToLower(a.Key), strings.ToLower(strings.TrimSpace(a.Val))
			switch {
			case name == "style":
				out = append(out, fmt.Sprintf("an inline style on <%s>: %q", el, a.Val))
			case strings.HasPrefix(name, "on"):
				out = append(out, fmt.Sprintf("an inline event handler on <%s>: %s=%q", el, a.Key, a.Val))
			case (name == "href" || name == "src" || name == "action" || name == "formaction") && strings.HasPrefix(val, "javascript:"):
				out = append(out, fmt.Sprintf("a javascript: URL on <%s>", el))
			}
		}
	})
	doc.Find(`link[rel~="stylesheet"]`).Each(func(_ int, s *goquery.Selection) {
		if href, _ := s.Attr("href"); !strings.HasPrefix(href, "/static/") {
			out = append(out, fmt.Sprintf("a stylesheet from %q (only /static/ is allowed)", href))
		}
	})
	doc.Find("img[src], iframe, object, embed, frame").Each(func(_ int, s *goquery.Selection) {
		src, _ := s.Attr("src")
		if el := goquery.NodeName(s); el != "img" || !strings.HasPrefix(src, "/") || strings.HasPrefix(src, "//") {
			out = append(out, fmt.Sprintf("<%s src=%q>", el, src))
		}
	})
	return out, nil
}
