package family

// What an image part costs in prompt tokens, by OpenAI's vision guide.
// Two schemes:
//
//   - tiles: the image is scaled to fit 2048×2048, then its shorter side to
//     768, and cut into 512-pixel tiles: base + tiles × perTile ("low"
//     detail: base alone);
//   - patches: 32-pixel patches, shrunk to fit a budget when there are
//     more: patches × multiplier, rounded up. "low" detail is not cheaper
//     on these (measured), so it is priced as "high".
//
// When the size is not known (an image sent by URL, which Sluice does not
// fetch) the worst case is reserved: 8 tiles (768×2048 after scaling), or
// the whole patch budget.
type imageCost struct {
	base, perTile int64 // tiles; 0 for patches
	// patches: the multiplier in hundredths and the budget, per detail
	multiplier       int64
	budget, original int64 // original: the budget of detail "original" (0: as budget)
	// flat, for families Sluice has no formula for: the cost of any image
	flat int64
}

// Tile and patch prices per model (longest prefix wins). Where OpenAI's
// guide changed over time, the larger multiplier and budget are taken.
var imageCosts = []prefixed[imageCost]{
	{"gpt-4-turbo", imageCost{base: 85, perTile: 170}},
	{"gpt-4-vision", imageCost{base: 85, perTile: 170}},
	{"gpt-4o", imageCost{base: 85, perTile: 170}},
	{"chatgpt-4o", imageCost{base: 85, perTile: 170}},
	{"gpt-4o-mini", imageCost{base: 2833, perTile: 5667}},
	{"gpt-4.1", imageCost{base: 85, perTile: 170}},
	{"gpt-4.5", imageCost{base: 85, perTile: 170}},
	{"gpt-4.1-mini", imageCost{multiplier: 162, budget: 6144}},
	{"gpt-4.1-nano", imageCost{multiplier: 246, budget: 1536}},
	{"o1", imageCost{base: 75, perTile: 150}},
	{"o3", imageCost{base: 75, perTile: 150}},
	{"o4-mini", imageCost{multiplier: 172, budget: 1536}},
	{"computer-use", imageCost{base: 65, perTile: 129}},
	{"gpt-5", imageCost{base: 70, perTile: 140}},
	{"gpt-5-mini", imageCost{multiplier: 162, budget: 1536}},
	{"gpt-5-nano", imageCost{multiplier: 246, budget: 1536}},
	// gpt-5.2 and later: patches at 1.2 with budgets up to 10,000
	// ("original": up to the 30,000 patches the API accepts at all).
	{"gpt-5.2", imageCost{multiplier: 120, budget: 10000, original: 30000}},
	{"gpt-5.3", imageCost{multiplier: 120, budget: 10000, original: 30000}},
	{"gpt-5.4", imageCost{multiplier: 120, budget: 10000, original: 30000}},
	{"gpt-5.5", imageCost{multiplier: 120, budget: 10000, original: 30000}},
	{"gpt-5.6", imageCost{multiplier: 120, budget: 10000, original: 30000}},
	{"gpt-5.4-mini", imageCost{multiplier: 162, budget: 10000, original: 30000}},
	{"gpt-5.4-nano", imageCost{multiplier: 246, budget: 10000, original: 30000}},
}

// unknownImages prices an image for a family Sluice has no formula for:
// above Anthropic's largest (about 1,600 tokens) and Gemini's 258-token
// tiles of a 3,072-pixel square (16 tiles, 4,128 tokens).
var unknownImages = imageCost{flat: 6000}

// ImageTokens is what one image costs the family at most: width and
// height in pixels (0 when unknown), detail as the request gave it ("",
// "low", "high", "auto", "original").
func (f Family) ImageTokens(width, height int64, detail string) int64 {
	c := f.image
	switch {
	case c.flat > 0:
		return c.flat
	case c.perTile > 0:
		if detail == "low" {
			return c.base
		}
		tiles := int64(8)
		if width > 0 && height > 0 {
			tiles = tileCount(width, height)
		}
		return c.base + tiles*c.perTile
	default:
		budget := c.budget
		if c.original > 0 && (detail == "original" || detail == "auto" || detail == "") {
			// auto means original on the newest models: take the larger.
			budget = c.original
		}
		patches := budget
		if width > 0 && height > 0 {
			patches = min(ceilDiv(width, 32)*ceilDiv(height, 32), budget)
		}
		return ceilDiv(patches*c.multiplier, 100)
	}
}

// tileCount is the 512-pixel tiles of an image after it is scaled to fit
// 2048×2048 and its shorter side to 768 (scaled sides rounded down).
func tileCount(w, h int64) int64 {
	if m := max(w, h); m > 2048 {
		w, h = max(w*2048/m, 1), max(h*2048/m, 1)
	}
	if s := min(w, h); s > 768 {
		w, h = max(w*768/s, 1), max(h*768/s, 1)
	}
	return ceilDiv(w, 512) * ceilDiv(h, 512)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
