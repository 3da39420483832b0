package family

import (
	"strings"

	"github.com/sluicehq/sluice/chat/bpe"
)

// encoding is a tokenizer a family is billed by, loaded on first use, and
// how many token ids it has (its vocabulary and special tokens: tiktoken's
// n_vocab), so that a request sending token ids can be checked.
type encoding struct {
	name    string
	counter func() Counter
	vocab   int64
}

var (
	o200k  = &encoding{"o200k_base", func() Counter { return bpe.O200kBase() }, 200019}
	cl100k = &encoding{"cl100k_base", func() Counter { return bpe.Cl100kBase() }, 100277}
)

// tokenizerOf is tiktoken's own model table (tiktoken/model.py): o200k_base
// for gpt-4o and everything since (gpt-oss's o200k_harmony differs only in
// special tokens, which a prompt's text never produces), cl100k_base for
// gpt-4, gpt-3.5 and the embedding models of their time; nil for models
// that are not OpenAI's.
func tokenizerOf(m string) *encoding {
	for _, p := range []string{"gpt-4o", "chatgpt-4o", "ft:gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4-mini", "gpt-oss", "computer-use"} {
		if strings.HasPrefix(m, p) {
			return o200k
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002", "davinci-002", "babbage-002"} {
		if strings.HasPrefix(m, p) {
			return cl100k
		}
	}
	return nil
}
