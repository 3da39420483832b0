package bpe

import (
	"fmt"

	"github.com/tiktoken-go/tokenizer"
)

// load builds an encoding from tiktoken-go's vocabulary. The vocabulary is
// unexported there, so it is read back one id at a time through Decode; ids
// below nVocab (tiktoken's n_vocab) that Decode rejects are the special tokens
// and the gaps before them, which are no ranks for BPE.
func load(name tokenizer.Encoding, nVocab int) *Encoding {
	codec, err := tokenizer.Get(name)
	if err != nil {
		panic(fmt.Sprintf("bpe: %s: %v", name, err))
	}
	tokens := make([]string, nVocab)
	id := make([]uint, 1)
	for i := range tokens {
		id[0] = uint(i)
		if tok, err := codec.Decode(id); err == nil {
			tokens[i] = tok
		}
	}
	return &Encoding{
		name:    codec.GetName(),
		o200k:   name == tokenizer.O200kBase,
		classes: classes(),
		ranks:   newRankTable(tokens),
	}
}
