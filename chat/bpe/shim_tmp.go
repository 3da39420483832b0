// TEMPORARY shim until the real package lands (h-bpe): tiktoken-go behind the same API.
package bpe

import (
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

type Encoding struct {
	name string
	c    tokenizer.Codec
}

var o200k = sync.OnceValue(func() *Encoding { c, _ := tokenizer.Get(tokenizer.O200kBase); return &Encoding{"o200k_base", c} })
var cl100k = sync.OnceValue(func() *Encoding { c, _ := tokenizer.Get(tokenizer.Cl100kBase); return &Encoding{"cl100k_base", c} })

func O200kBase() *Encoding                      { return o200k() }
func Cl100kBase() *Encoding                     { return cl100k() }
func (e *Encoding) Name() string                { return e.name }
func (e *Encoding) Count(text []byte) int       { n, _ := e.c.Count(string(text)); return n }
func (e *Encoding) CountString(text string) int { n, _ := e.c.Count(text); return n }
