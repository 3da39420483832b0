package bpe

// The pre-tokenizers below are hand-written equivalents of the split patterns
// as tiktoken-go runs them. That is regexp2 (.NET semantics) through code that
// regexp2cg generated from the patterns (tiktoken-go's codec/regexp.gen.go):
// alternatives are tried left to right and the first that matches wins; the
// whole alternation is atomic, so a later alternative is never tried once one
// has matched. Each function returns the end of the piece that starts at p,
// or -1 where no alternative matches (no character is such: see cP).
//
// Where the generated code differs from the textbook reading of the pattern,
// we follow the generated code, whose counts are the ones we equal, where
// it counts more (DEL, which it skips, is punctuation here: see cP):
//   - in \s*[\r\n]+ the backtracking of \s* goes to the FIRST \r or \n of
//     the run of spaces, not the last (see spaceEnd).

// splitO200k returns the end of the o200k_base piece at p. The pattern is
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n/]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
func splitO200k(t *classTable, text []byte, p int) int {
	c0, n0 := t[text[p]], 1 // classAt, inlined by hand for ASCII
	if text[p] >= 0x80 {
		c0, n0 = t.classOfRune(text[p:])
	}
	if c0&(cP|cU|cW) != 0 {
		if end := wordO200k(t, text, p, c0, n0); end >= 0 {
			return end
		}
	}
	return splitRest(t, text, p, c0, true)
}

// wordO200k matches the first two alternatives, or returns -1.
//
// Call the first class U ([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]) and the second W
// ([\p{Ll}\p{Lm}\p{Lo}\p{M}]); Lm, Lo and M are in both. The first
// alternative, U*W+, first takes the longest run of U from q (after the
// optional prefix character), then needs one W:
//   - if the character after the run is W (it can only be Ll), W+ takes the
//     run of W from there;
//   - otherwise U* gives back characters one at a time until W+ can match
//     at the last character of the run that is also W; W+ then takes just
//     that character, since every one after it failed W;
//   - failing both, the optional prefix is given back. That helps only if
//     the prefix itself is W, i.e. a mark (M is neither L nor N, so it can be
//     the prefix): W+ then takes just the mark.
//
// If the first alternative fails, every character of the run is Lu or Lt, and
// the second, U+W*, matches the prefix and the run if the run is not empty.
// Either is followed by an optional contraction, which never backtracks.
func wordO200k(t *classTable, text []byte, p int, c0 uint8, n0 int) int {
	q := p
	if c0&cP != 0 {
		q += n0
	}
	e, lastW := q, -1
	var ce uint8 // the class of text[e], the first character after the run
	for e < len(text) {
		c, n := t[text[e]], 1
		if text[e] >= 0x80 {
			c, n = t.classOfRune(text[e:])
		}
		if c&cU == 0 {
			ce = c
			break
		}
		e += n
		if c&cW != 0 {
			lastW = e
		}
	}
	var end int
	switch {
	case e < len(text) && ce&cW != 0:
		end = runOf(t, text, e, cW)
	case lastW >= 0:
		end = lastW
	case q > p && c0&cM != 0:
		end = q
	case e > q:
		end = e
	default:
		return -1
	}
	return contraction(text, end)
}

// splitCl100k returns the end of the cl100k_base piece at p. The pattern is
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)
//	|[^\r\n\p{L}\p{N}]?\p{L}+
//	|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
func splitCl100k(t *classTable, text []byte, p int) int {
	if text[p] == '\'' {
		if end := contraction(text, p); end > p {
			return end
		}
	}
	c0, n0 := t[text[p]], 1
	if text[p] >= 0x80 {
		c0, n0 = t.classOfRune(text[p:])
	}
	if c0&(cP|cL) != 0 {
		// \p{L}+ is atomic, so the only backtracking is giving back the
		// prefix character, and that cannot help: it is not a letter.
		q := p
		if c0&cP != 0 {
			q += n0
		}
		if end := runOf(t, text, q, cL); end > q {
			return end
		}
	}
	return splitRest(t, text, p, c0, false)
}

// splitRest matches the alternatives the two patterns share after the words:
// \p{N}{1,3}, then ` ?[^\s\p{L}\p{N}]+[\r\n]*` (o200k also takes '/' in the
// tail: slash), then the three for spaces.
func splitRest(t *classTable, text []byte, p int, c0 uint8, slash bool) int {
	if c0&cN != 0 {
		// \p{N}{1,3} is atomic and greedy: up to three.
		end := p
		for i := 0; i < 3 && end < len(text); i++ {
			c, n := t.classAt(text, end)
			if c&cN == 0 {
				break
			}
			end += n
		}
		return end
	}
	if c0&cQ != 0 || text[p] == ' ' {
		// " ?" is atomic, but giving the space back could not help: a space
		// is not in [^\s\p{L}\p{N}]. Every loop here is atomic too.
		q := p
		if text[p] == ' ' {
			q++
		}
		if end := runOf(t, text, q, cQ); end > q {
			for end < len(text) && (text[end] == '\r' || text[end] == '\n' || slash && text[end] == '/') {
				end++
			}
			return end
		}
	}
	if c0&cS != 0 {
		return spaceEnd(t, text, p)
	}
	return -1
}

// spaceEnd returns the end of the piece for the run of spaces at p:
//
//   - \s*[\r\n]+: \s* takes the whole run, then [\r\n]+ fails (the run ends
//     at a non-space, and \r and \n are spaces), so \s* backtracks. The
//     generated code backtracks straight to the first \r or \n in the run
//     (helpers.IndexOfAny2, where .NET uses LastIndexOfAny), and [\r\n]+ takes
//     the \r and \n from there. So "\n \nx" is "\n", " \n", "x", not "\n \n",
//     "x". This also means we need not look past the first line break.
//   - \s+(?!\S): the whole run if it ends the text, else all but its last
//     character, which is left to go before the word that follows;
//   - \s+: the whole run, when it is a single character before a non-space.
func spaceEnd(t *classTable, text []byte, p int) int {
	end, last := p, p
	for end < len(text) {
		if b := text[end]; b == '\r' || b == '\n' {
			for end < len(text) && (text[end] == '\r' || text[end] == '\n') {
				end++
			}
			return end
		}
		c, n := t.classAt(text, end)
		if c&cS == 0 {
			break
		}
		last = end
		end += n
	}
	if end == len(text) || last == p {
		return end
	}
	return last
}

// runOf returns the end of the run of characters of class bit from i.
func runOf(t *classTable, text []byte, i int, bit uint8) int {
	for i < len(text) {
		b := text[i]
		if b < 0x80 {
			if t[b]&bit == 0 {
				return i
			}
			i++
			continue
		}
		c, n := t.classOfRune(text[i:])
		if c&bit == 0 {
			return i
		}
		i += n
	}
	return i
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i. As
// .NET case folding has it, and the generated code with it, 's also matches
// 'ſ (U+017F LATIN SMALL LETTER LONG S); nothing else outside ASCII does.
func contraction(text []byte, i int) int {
	if i+1 >= len(text) || text[i] != '\'' {
		return i
	}
	switch text[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(text) && text[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(text) && text[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	if text[i+1] == 0xC5 && i+2 < len(text) && text[i+2] == 0xBF {
		return i + 3 // ſ
	}
	return i
}
