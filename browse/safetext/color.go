package safetext

import (
	"math"
	"strconv"
	"strings"
)

// Colour values are 0xRRGGBB or one of these.
const (
	// colUnknown: set, but to something that cannot be told (var(), a
	// translucent colour, a background image).
	colUnknown = -1
	// colTransparent: a fully or almost transparent colour.
	colTransparent = -2
	// colNone: not declared.
	colNone = -3
	// colInherit: the parent's (inherit, currentcolor; for a background,
	// transparent or none: the parent's background shows through).
	colInherit = -4
	// colCurrent: a background in the element's own text colour.
	colCurrent = -5
)

// namedColors are the CSS named colours (and the system colours canvas
// and canvastext in their light-scheme values).
var namedColors = func() map[string]int32 {
	const table = `aliceblue f0f8ff antiquewhite faebd7 aqua 00ffff aquamarine 7fffd4 azure f0ffff
	beige f5f5dc bisque ffe4c4 black 000000 blanchedalmond ffebcd blue 0000ff blueviolet 8a2be2
	brown a52a2a burlywood deb887 cadetblue 5f9ea0 chartreuse 7fff00 chocolate d2691e coral ff7f50
	cornflowerblue 6495ed cornsilk fff8dc crimson dc143c cyan 00ffff darkblue 00008b darkcyan 008b8b
	darkgoldenrod b8860b darkgray a9a9a9 darkgreen 006400 darkgrey a9a9a9 darkkhaki bdb76b
	darkmagenta 8b008b darkolivegreen 556b2f darkorange ff8c00 darkorchid 9932cc darkred 8b0000
	darksalmon e9967a darkseagreen 8fbc8f darkslateblue 483d8b darkslategray 2f4f4f
	darkslategrey 2f4f4f darkturquoise 00ced1 darkviolet 9400d3 deeppink ff1493 deepskyblue 00bfff
	dimgray 696969 dimgrey 696969 dodgerblue 1e90ff firebrick b22222 floralwhite fffaf0
	forestgreen 228b22 fuchsia ff00ff gainsboro dcdcdc ghostwhite f8f8ff gold ffd700 goldenrod daa520
	gray 808080 green 008000 greenyellow adff2f grey 808080 honeydew f0fff0 hotpink ff69b4
	indianred cd5c5c indigo 4b0082 ivory fffff0 khaki f0e68c lavender e6e6fa lavenderblush fff0f5
	lawngreen 7cfc00 lemonchiffon fffacd lightblue add8e6 lightcoral f08080 lightcyan e0ffff
	lightgoldenrodyellow fafad2 lightgray d3d3d3 lightgreen 90ee90 lightgrey d3d3d3 lightpink ffb6c1
	lightsalmon ffa07a lightseagreen 20b2aa lightskyblue 87cefa lightslategray 778899
	lightslategrey 778899 lightsteelblue b0c4de lightyellow ffffe0 lime 00ff00 limegreen 32cd32
	linen faf0e6 magenta ff00ff maroon 800000 mediumaquamarine 66cdaa mediumblue 0000cd
	mediumorchid ba55d3 mediumpurple 9370db mediumseagreen 3cb371 mediumslateblue 7b68ee
	mediumspringgreen 00fa9a mediumturquoise 48d1cc mediumvioletred c71585 midnightblue 191970
	mintcream f5fffa mistyrose ffe4e1 moccasin ffe4b5 navajowhite ffdead navy 000080 oldlace fdf5e6
	olive 808000 olivedrab 6b8e23 orange ffa500 orangered ff4500 orchid da70d6 palegoldenrod eee8aa
	palegreen 98fb98 paleturquoise afeeee palevioletred db7093 papayawhip ffefd5 peachpuff ffdab9
	peru cd853f pink ffc0cb plum dda0dd powderblue b0e0e6 purple 800080 rebeccapurple 663399
	red ff0000 rosybrown bc8f8f royalblue 4169e1 saddlebrown 8b4513 salmon fa8072 sandybrown f4a460
	seagreen 2e8b57 seashell fff5ee sienna a0522d silver c0c0c0 skyblue 87ceeb slateblue 6a5acd
	slategray 708090 slategrey 708090 snow fffafa springgreen 00ff7f steelblue 4682b4 tan d2b48c
	teal 008080 thistle d8bfd8 tomato ff6347 turquoise 40e0d0 violet ee82ee wheat f5deb3
	white ffffff whitesmoke f5f5f5 yellow ffff00 yellowgreen 9acd32 canvas ffffff canvastext 000000`
	f := strings.Fields(table)
	m := make(map[string]int32, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		v, _ := strconv.ParseUint(f[i+1], 16, 32)
		m[f[i]] = int32(v)
	}
	return m
}()

// parseColor returns 0xRRGGBB, colTransparent for a fully or almost
// transparent colour, or colUnknown. v is lower-case.
func parseColor(v string) int32 {
	if v == "transparent" {
		return colTransparent
	}
	if c, ok := namedColors[v]; ok {
		return c
	}
	if strings.HasPrefix(v, "#") {
		return hexColor(v[1:])
	}
	for _, fn := range [...]string{"rgba(", "rgb(", "hsla(", "hsl(", "hwb(", "lab(", "lch(", "oklab(", "oklch(", "color("} {
		if strings.HasPrefix(v, fn) {
			return funcColor(fn, v[len(fn):])
		}
	}
	return colUnknown
}

// hexColor parses the digits of #rgb, #rgba, #rrggbb or #rrggbbaa.
func hexColor(h string) int32 {
	x, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return colUnknown
	}
	switch len(h) {
	case 3:
		return int32((x>>8&0xf)*0x110000 + (x>>4&0xf)*0x1100 + (x&0xf)*0x11)
	case 4:
		if x&0xf == 0 {
			return colTransparent
		}
		x >>= 4
		return int32((x>>8&0xf)*0x110000 + (x>>4&0xf)*0x1100 + (x&0xf)*0x11)
	case 6:
		return int32(x)
	case 8:
		if x&0xff <= 0x0d {
			return colTransparent
		}
		return int32(x >> 8)
	}
	return colUnknown
}

// funcColor parses the arguments of a colour function fn ("rgb(", ...):
// rgb and hsl colours are computed, the others are known only when
// transparent.
func funcColor(fn, args string) int32 {
	var parts []string
	for tok := range cssTokens(args) {
		parts = append(parts, tok)
	}
	// The alpha is the 4th component ("color(srgb r g b / a)": 5th).
	ai := 3
	if fn == "color(" {
		ai = 4
	}
	if len(parts) > ai {
		a, ok := fraction(parts[ai])
		if ok && a <= 0.05 {
			return colTransparent
		}
		if !ok || a < 1 {
			return colUnknown
		}
	}
	if len(parts) < 3 {
		return colUnknown
	}
	switch {
	case strings.HasPrefix(fn, "rgb"):
		var c int32
		for _, p := range parts[:3] {
			f, unit, ok := number(p)
			if !ok || unit != "" && unit != "%" {
				return colUnknown
			}
			if unit == "%" {
				f = f * 255 / 100
			}
			c = c<<8 | int32(min(max(f+0.5, 0), 255))
		}
		return c
	case strings.HasPrefix(fn, "hsl"):
		return hslColor(parts[0], parts[1], parts[2])
	}
	return colUnknown
}

// hslColor converts hsl(h s l) to 0xRRGGBB.
func hslColor(hs, ss, ls string) int32 {
	h, unit, ok := number(hs)
	if !ok {
		return colUnknown
	}
	switch unit {
	case "", "deg":
	case "turn":
		h *= 360
	case "rad":
		h *= 180 / math.Pi
	case "grad":
		h *= 0.9
	default:
		return colUnknown
	}
	s, su, ok1 := number(ss)
	l, lu, ok2 := number(ls)
	if !ok1 || !ok2 || su != "%" && su != "" || lu != "%" && lu != "" {
		return colUnknown
	}
	s, l = min(max(s/100, 0), 1), min(max(l/100, 0), 1)
	h = math.Mod(math.Mod(h, 360)+360, 360)
	// CSS Color 4, "Converting HSL colors to sRGB colors".
	ch := func(n float64) int32 {
		k := math.Mod(n+h/30, 12)
		a := s * min(l, 1-l)
		v := l - a*max(-1, min(k-3, 9-k, 1))
		return int32(min(max(v*255+0.5, 0), 255))
	}
	return ch(0)<<16 | ch(8)<<8 | ch(4)
}

// fgValue is the value of a color declaration (lower-case).
func fgValue(v string) int32 {
	switch v {
	case "inherit", "unset", "revert", "revert-layer", "currentcolor":
		return colInherit
	case "initial":
		return 0 // canvastext
	}
	return parseColor(v)
}

// bgValue is the value of a background-color declaration, or of the
// background shorthand when shorthand is set (lower-case). An image or a
// value that cannot be told gives colUnknown; no colour at all lets the
// parent's background show (colInherit).
func bgValue(v string, shorthand bool) int32 {
	switch v {
	case "transparent", "none", "inherit", "initial", "unset", "revert", "revert-layer":
		return colInherit
	case "currentcolor":
		return colCurrent
	}
	if !shorthand {
		if c := parseColor(v); c != colTransparent {
			return c
		}
		return colInherit
	}
	if bgImage(v) {
		return colUnknown
	}
	for w := range topWords(v) {
		if w == "currentcolor" {
			return colCurrent
		}
		switch c := parseColor(w); {
		case c == colTransparent:
			return colInherit
		case c != colUnknown:
			return c
		case strings.IndexByte(w, '(') >= 0 || strings.HasPrefix(w, "#"):
			return colUnknown // a colour function that cannot be told
		}
	}
	return colInherit
}

// bgImage reports whether a background value holds an image (or
// something computed, such as var()), which may cover the colour.
func bgImage(v string) bool {
	for _, fn := range [...]string{"url(", "gradient(", "image(", "image-set(", "element(", "paint(", "cross-fade(", "var(", "env(", "attr("} {
		if strings.Contains(v, fn) {
			return true
		}
	}
	return false
}

// topWords yields the words of v separated by white space or commas
// outside parentheses, so that "rgb(0, 0, 0)" is one word.
func topWords(v string) func(func(string) bool) {
	return func(yield func(string) bool) {
		depth, start := 0, -1
		for i := 0; i <= len(v); i++ {
			c := byte(' ')
			if i < len(v) {
				c = v[i]
			}
			switch {
			case c == '(':
				depth++
			case c == ')':
				depth--
			case depth <= 0 && (c == ' ' || c == '\t' || c == '\n' || c == ','):
				if start >= 0 && !yield(v[start:i]) {
					return
				}
				start = -1
				continue
			}
			if start < 0 {
				start = i
			}
		}
	}
}

// sameColor reports whether two known colours are too close to tell apart
// (every channel within 16).
func sameColor(a, b int32) bool {
	if a < 0 || b < 0 {
		return false
	}
	for sh := 0; sh < 24; sh += 8 {
		d := (a>>sh)&0xff - (b>>sh)&0xff
		if d > 16 || d < -16 {
			return false
		}
	}
	return true
}

// Precedence tiers of colour declarations, lowest first (the author
// origin of CSS Cascade 5): presentational attributes (font color,
// bgcolor), rules in a cascade layer, rules outside layers, the style
// attribute, then the important declarations in the reverse order.
const (
	tierAttr = iota
	tierLayered
	tierRule
	tierInline
	tierImportantRule
	tierImportantLayered
	tierImportantInline
)

// tierOf returns the tier of a declaration from a rule (layered or not)
// or, when inline, from the style attribute.
func tierOf(important, layered, inline bool) uint64 {
	switch {
	case inline && important:
		return tierImportantInline
	case inline:
		return tierInline
	case important && layered:
		return tierImportantLayered
	case important:
		return tierImportantRule
	case layered:
		return tierLayered
	}
	return tierRule
}

// rank orders declarations of one property: tier, then specificity
// (packed by packSpec), then source order.
func rank(tier uint64, spec uint32, order int32) uint64 {
	return tier<<56 | uint64(spec)<<24 | uint64(order)&0xffffff
}

// packSpec packs a specificity (ids, classes, types), each capped at 1023.
func packSpec(a, b, c int) uint32 {
	return uint32(min(a, 1023))<<20 | uint32(min(b, 1023))<<10 | uint32(min(c, 1023))
}

// pick is the winning declaration of one property.
type pick struct {
	rank uint64
	val  int32
	set  bool
}

// colorPick collects the colour declarations that apply to one element
// and keeps the winner of each property in two variants: [0] with every
// rule, [1] without the uncertain ones (rules under a condition such as
// @media, whose selector is matched only approximately, ...). Text is
// hidden when it is invisible in either.
type colorPick struct {
	fg, bg [2]pick
}

// offer adds a declaration of value val and rank r to p.
func offer(p *[2]pick, val int32, r uint64, uncertain bool) {
	for v := range p {
		if v == 1 && uncertain {
			break
		}
		if !p[v].set || r >= p[v].rank {
			p[v] = pick{rank: r, val: val, set: true}
		}
	}
}

// apply sets the colours of f from the winners, inheriting the text
// colour and, where the element paints no background, the parent's
// background.
func (cp *colorPick) apply(f, parent *frame) {
	for v := range 2 {
		fg := parent.fg[v]
		if p := cp.fg[v]; p.set && p.val != colInherit {
			fg = p.val
		}
		bg := parent.bg[v]
		if p := cp.bg[v]; p.set {
			switch p.val {
			case colInherit:
			case colCurrent:
				bg = colUnknown
				if fg >= 0 {
					bg = fg
				}
			default:
				bg = p.val
			}
		}
		f.fg[v], f.bg[v] = fg, bg
	}
}

// colorHidden reports whether the text directly in f cannot be seen for
// its colours in either variant.
func (f *frame) colorHidden() bool {
	for v := range 2 {
		if f.fg[v] == colTransparent || sameColor(f.fg[v], f.bg[v]) {
			return true
		}
	}
	return false
}
