package safetext

import (
	"strconv"
	"strings"
)

// hide is a set of reasons why content is not visible.
type hide uint8

const (
	// hideHard: the element and everything in it is not rendered or
	// cannot be seen (display:none, opacity:0, off-screen, clipped, ...).
	// No descendant can undo it.
	hideHard hide = 1 << iota
	// hideFont: text is too small to see (font-size:0). Inherited; a
	// descendant with an absolute font size makes its text visible again.
	hideFont
	// hideVis: visibility:hidden. Inherited; a descendant with
	// visibility:visible is visible again.
	hideVis
	// hideColor: the text colour is transparent. Inherited through the
	// colour; a descendant that sets a colour is visible again.
	hideColor
	// hideFixed: position: fixed. Hides only together with hideFarV,
	// whichever declarations of the element set them.
	hideFixed
	// hideFarV: a vertical offset of at least a viewport (top: 100vh),
	// which moves a fixed element off-screen.
	hideFarV
)

// hidePartial is the pair of reasons that hide only together.
const hidePartial = hideFixed | hideFarV

// style is what one set of declarations does to visibility.
type style struct {
	set   hide // reasons set here
	clear hide // inherited reasons undone here (hideFont, hideVis)
	// fg and bg are the declared text and background colours (colNone
	// when not declared; see bgValue), fgImp and bgImp whether they are
	// !important.
	fg, bg       int32
	fgImp, bgImp bool
	// toggle: every reason set here is display:none, visibility:hidden
	// or opacity, the ways a page hides itself until its script shows it.
	toggle bool
}

// toggleProps are the properties of style.toggle.
var toggleProps = map[string]bool{"display": true, "visibility": true, "opacity": true, "content-visibility": true}

// evalStyle evaluates CSS declarations (a style attribute or the body of a
// rule). It errs on the side of hiding: whatever looks like a hiding
// technique counts, overrides by later rules are not modelled (colours
// excepted: they are returned for the cascade of colorPick).
func evalStyle(decls string) style {
	st := style{fg: colNone, bg: colNone}
	if strings.Contains(decls, "/*") || strings.IndexByte(decls, '\\') >= 0 {
		decls = decodeCSS(decls)
	}
	decls = strings.ToLower(decls)
	var tinyW, tinyH, zeroW, clipped, image, imageImp, other bool
	for decls != "" {
		var d string
		if i := strings.IndexByte(decls, ';'); i >= 0 {
			d, decls = decls[:i], decls[i+1:]
		} else {
			d, decls = decls, ""
		}
		colon := strings.IndexByte(d, ':')
		if colon < 0 {
			continue
		}
		prop := strings.TrimSpace(d[:colon])
		v := d[colon+1:]
		imp := false
		if i := strings.IndexByte(v, '!'); i >= 0 {
			imp = strings.TrimSpace(v[i+1:]) == "important"
			v = v[:i]
		}
		v = strings.TrimSpace(v)
		before := st.set &^ hideFixed
		switch prop {
		case "display":
			if firstWord(v) == "none" {
				st.set |= hideHard
			}
		case "content-visibility":
			if v == "hidden" {
				st.set |= hideHard
			}
		case "visibility":
			switch v {
			case "hidden", "collapse":
				st.set |= hideVis
			case "visible":
				st.clear |= hideVis
			}
		case "opacity", "zoom", "scale":
			if f, ok := fraction(v); ok && f <= 0.1 {
				st.set |= hideHard
			}
		case "filter":
			if i := strings.Index(v, "opacity("); i >= 0 {
				if f, ok := fraction(strings.TrimRight(firstWord(v[i+len("opacity("):]), ")")); ok && f <= 0.1 {
					st.set |= hideHard
				}
			}
		case "font-size":
			st.fontSize(firstWord(v))
		case "font":
			for tok := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ' ' || r == '/' || r == '\t' || r == '\n' }) {
				if _, unit, ok := number(tok); ok && (unit != "" || tok == "0" || tok == "0.0") || fontKeywords[tok] {
					st.fontSize(tok)
					break
				}
			}
		case "color":
			st.fg, st.fgImp = fgValue(v), imp
		case "-webkit-text-fill-color":
			// Paints the text instead of color, unless currentcolor.
			if c := fgValue(v); c != colInherit {
				st.fg, st.fgImp = c, imp
			}
		case "background-color", "background":
			st.bg, st.bgImp = bgValue(v, prop == "background"), imp
		case "background-image":
			if bgImage(v) {
				image, imageImp = true, imp
			}
		case "position":
			if v == "fixed" {
				st.set |= hideFixed
			}
		case "left", "right", "inset-inline-start", "inset-inline-end":
			if offscreen(v, true) || beyondViewport(v, false) {
				st.set |= hideHard
			}
		case "top", "bottom", "inset-block-start", "inset-block-end":
			if offscreen(v, true) {
				st.set |= hideHard
			} else if beyondViewport(v, true) {
				st.set |= hideFarV
			}
		case "inset":
			if offscreen(v, true) || beyondViewport(v, false) {
				st.set |= hideHard
			} else if beyondViewport(v, true) {
				st.set |= hideFarV
			}
		case "translate", "transform":
			if hard, farV := translation(v, prop == "translate"); hard || prop == "transform" && zeroScale(v) {
				st.set |= hideHard
			} else if farV {
				st.set |= hideFarV
			}
		case "margin", "margin-left", "margin-inline-start", "text-indent":
			if offscreen(v, false) || beyondViewport(v, false) {
				st.set |= hideHard
			}
		case "margin-top", "margin-right", "margin-bottom", "margin-block-start":
			if offscreen(v, false) {
				st.set |= hideHard
			}
		case "clip":
			if tinyRect(v) {
				st.set |= hideHard
			}
		case "clip-path":
			if clipPathHides(v) {
				st.set |= hideHard
			}
		case "width", "max-width":
			if px, ok := length(firstWord(v)); ok && px <= 1 {
				tinyW = true
				zeroW = zeroW || px <= 0
			}
		case "height", "max-height":
			if px, ok := length(firstWord(v)); ok && px <= 1 {
				tinyH = true
			}
		case "overflow", "overflow-x", "overflow-y":
			if strings.Contains(v, "hidden") || strings.Contains(v, "clip") {
				clipped = true
			}
		}
		if st.set&^hideFixed != before && !toggleProps[prop] {
			other = true
		}
	}
	if zeroW || (tinyW || tinyH) && clipped || st.set&hidePartial == hidePartial {
		st.set |= hideHard
		other = true
	}
	if image {
		st.bg, st.bgImp = colUnknown, imageImp
	}
	if st.fg == colTransparent {
		st.set |= hideColor
		other = true
	}
	st.toggle = !other
	return st
}

var fontKeywords = map[string]bool{
	"xx-small": true, "x-small": true, "small": true, "medium": true, "large": true,
	"x-large": true, "xx-large": true, "xxx-large": true,
}

// fontSize records the effect of a font-size value.
func (st *style) fontSize(v string) {
	if fontKeywords[v] {
		st.clear |= hideFont
		return
	}
	f, unit, ok := number(v)
	if !ok {
		return
	}
	switch unit {
	case "", "px":
		if unit == "" && f != 0 {
			return
		}
	case "pt":
		f *= 4.0 / 3
	case "em", "rem":
		f *= 16
	case "%":
		f = f * 16 / 100
	case "ex", "ch":
		f *= 8
	case "vw", "vh", "vmin", "vmax", "cqw", "cqh":
		f *= 10
	case "mm":
		f *= 3.78
	case "cm":
		f *= 37.8
	case "in":
		f *= 96
	default:
		return
	}
	if f <= 2 {
		st.set |= hideFont
	} else if unit != "em" && unit != "%" && unit != "ex" && unit != "ch" {
		// An absolute size resets an inherited font-size:0; a relative
		// one (1em of 0) stays 0.
		st.clear |= hideFont
	}
}

func firstWord(v string) string {
	if i := strings.IndexAny(v, " \t\n,"); i >= 0 {
		return v[:i]
	}
	return v
}

// number splits a CSS numeric token into its value and unit.
func number(tok string) (f float64, unit string, ok bool) {
	i := 0
	if i < len(tok) && (tok[i] == '-' || tok[i] == '+') {
		i++
	}
	digits := false
	for i < len(tok) && (tok[i] >= '0' && tok[i] <= '9' || tok[i] == '.') {
		digits = digits || tok[i] != '.'
		i++
	}
	if !digits {
		return 0, "", false
	}
	if i+1 < len(tok) && (tok[i] == 'e' || tok[i] == 'E') && (tok[i+1] >= '0' && tok[i+1] <= '9' || tok[i+1] == '-' || tok[i+1] == '+') {
		i++
		if tok[i] == '-' || tok[i] == '+' {
			i++
		}
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
	}
	f, err := strconv.ParseFloat(tok[:i], 64)
	if err != nil {
		return 0, "", false
	}
	unit = tok[i:]
	for j := 0; j < len(unit); j++ {
		if c := unit[j]; !(c >= 'a' && c <= 'z' || c == '%') {
			return 0, "", false
		}
	}
	return f, unit, true
}

// fraction parses an opacity-like value: a number or a percentage.
func fraction(v string) (float64, bool) {
	f, unit, ok := number(v)
	switch {
	case !ok:
		return 0, false
	case unit == "%":
		return f / 100, true
	case unit == "":
		return f, true
	}
	return 0, false
}

// length converts a CSS length to approximate CSS pixels (16px font, a
// 1000px viewport and container).
func length(tok string) (float64, bool) {
	f, unit, ok := number(tok)
	if !ok {
		return 0, false
	}
	switch unit {
	case "":
		return f, f == 0
	case "px":
		return f, true
	case "pt":
		return f * 4 / 3, true
	case "pc", "em", "rem", "lh", "rlh":
		return f * 16, true
	case "ex", "ch", "cap", "ic":
		return f * 8, true
	case "in":
		return f * 96, true
	case "cm":
		return f * 37.8, true
	case "mm":
		return f * 3.78, true
	case "q":
		return f * 0.945, true
	case "%", "vw", "vh", "vmin", "vmax", "svw", "svh", "lvw", "lvh", "dvw", "dvh", "cqw", "cqh", "vi", "vb":
		return f * 10, true
	}
	return 0, false
}

func cssTokens(v string) func(func(string) bool) {
	return strings.FieldsFuncSeq(v, func(r rune) bool {
		return r == ' ' || r == ',' || r == '(' || r == ')' || r == '/' || r == '\t' || r == '\n'
	})
}

// offscreen reports whether a position, margin, indent or transform value
// moves content out of view (<= -500px, or >= 5000px when far is set).
func offscreen(v string, far bool) bool {
	for tok := range cssTokens(v) {
		if px, ok := length(tok); ok && (px <= -500 || far && px >= 5000) {
			return true
		}
	}
	return false
}

// beyondViewport reports whether a position, inset, margin or transform
// value moves content by at least the viewport: 100vw (or vmax)
// horizontally; vertically 100vh, 100% (of a fixed element's containing
// block, the viewport) or 3000px. A calc() that subtracts is not judged.
func beyondViewport(v string, vertical bool) bool {
	if strings.Contains(v, " - ") {
		return false
	}
	for tok := range cssTokens(v) {
		f, unit, ok := number(tok)
		if !ok || f < 100 {
			continue
		}
		switch unit {
		case "vmax":
			return true
		case "vw", "svw", "lvw", "dvw", "vi":
			if !vertical {
				return true
			}
		case "vh", "svh", "lvh", "dvh", "vb", "%":
			if vertical {
				return true
			}
		default:
			if px, ok := length(tok); vertical && ok && px >= 3000 {
				return true
			}
		}
	}
	return false
}

// translation judges a translation: the transform functions translate(),
// translateX(), translateY() and translate3d() in a transform, or the
// value of the translate property (bare). hard: it moves content out of
// view sideways (by at least its own width, 100vw, or 500px left or 5000px
// right) or by 500px up or 5000px down; farV: it moves content down or up
// by its own height or more, or down by 3000px or 100vh, which takes it
// off-screen only when it is fixed to the viewport (a translated element
// in the flow overlaps its neighbours but stays on screen).
func translation(v string, bare bool) (hard, farV bool) {
	judge := func(tok string, vertical bool) {
		f, unit, ok := number(tok)
		if !ok {
			return
		}
		if unit == "%" {
			if f <= -100 || f >= 100 {
				if vertical {
					farV = true
				} else {
					hard = true
				}
			}
			return
		}
		if offscreen(tok, true) || beyondViewport(tok, false) && !vertical {
			hard = true
		} else if vertical && beyondViewport(tok, true) {
			farV = true
		}
	}
	axes := func(args string, first int) {
		i := first
		for tok := range cssTokens(args) {
			if i < 2 {
				judge(tok, i == 1)
			}
			i++
		}
	}
	if bare {
		axes(v, 0)
		return hard, farV
	}
	for rest := v; ; {
		i := strings.Index(rest, "translate")
		if i < 0 {
			break
		}
		rest = rest[i+len("translate"):]
		first := 0
		switch {
		case strings.HasPrefix(rest, "x("):
			rest = rest[1:]
		case strings.HasPrefix(rest, "y("):
			rest, first = rest[1:], 1
		case strings.HasPrefix(rest, "3d("):
			rest = rest[2:]
		case !strings.HasPrefix(rest, "("):
			continue
		}
		args := rest[1:]
		if j := strings.IndexByte(args, ')'); j >= 0 {
			args = args[:j]
		}
		if first == 1 {
			judge(strings.TrimSpace(args), true)
		} else if strings.HasPrefix(rest, "(") && len(args) > 0 {
			// translateX(x) has one axis; translate(x, y) and
			// translate3d(x, y, z) two.
			axes(args, 0)
		}
	}
	return hard, farV
}

// zeroScale reports transforms such as scale(0) or scaleY(0.01).
func zeroScale(v string) bool {
	for _, fn := range [...]string{"scale(", "scalex(", "scaley(", "scale3d("} {
		i := strings.Index(v, fn)
		if i < 0 {
			continue
		}
		args := v[i+len(fn):]
		if j := strings.IndexByte(args, ')'); j >= 0 {
			args = args[:j]
		}
		for tok := range cssTokens(args) {
			if f, ok := fraction(tok); ok && f <= 0.05 && f >= -0.05 {
				return true
			}
		}
	}
	return false
}

// tinyRect reports clip: rect(...) values that leave at most 1px.
func tinyRect(v string) bool {
	i := strings.Index(v, "rect(")
	if i < 0 {
		return false
	}
	var n [4]float64
	k := 0
	for tok := range cssTokens(v[i+len("rect("):]) {
		if k == 4 {
			break
		}
		px, ok := length(tok)
		if !ok {
			if tok == "auto" {
				px = 1e6
				if k < 2 {
					px = 0 // auto top/left is the edge
				}
			} else {
				return false
			}
		}
		n[k] = px
		k++
	}
	if k != 4 {
		return false
	}
	top, right, bottom, left := n[0], n[1], n[2], n[3]
	return bottom-top <= 1 || right-left <= 1
}

// clipPathHides reports clip-path values that cut everything away.
func clipPathHides(v string) bool {
	switch {
	case strings.HasPrefix(v, "inset("):
		for tok := range cssTokens(v[len("inset("):]) {
			if f, unit, ok := number(tok); ok && unit == "%" && f >= 50 {
				return true
			}
			break
		}
	case strings.HasPrefix(v, "circle("), strings.HasPrefix(v, "ellipse("):
		args := v[strings.IndexByte(v, '(')+1:]
		for tok := range cssTokens(args) {
			if px, ok := length(tok); ok && px <= 1 {
				return true
			}
			break
		}
	case strings.HasPrefix(v, "polygon("):
		// All points equal (usually all 0): nothing left.
		pts := strings.Split(strings.TrimSuffix(v[len("polygon("):], ")"), ",")
		if len(pts) >= 3 {
			first := strings.Join(strings.Fields(pts[0]), " ")
			for _, p := range pts[1:] {
				if strings.Join(strings.Fields(p), " ") != first {
					return false
				}
			}
			return true
		}
	}
	return false
}

// decodeCSS removes comments and resolves escapes (`\64 isplay` is
// `display`), so that escaped property names and values are recognised.
func decodeCSS(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' && i+1 < len(s) && s[i+1] == '*' {
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				break
			}
			i += 2 + end + 1
			b.WriteByte(' ')
			continue
		}
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		j := i
		for j < len(s) && j < i+6 && isHex(s[j]) {
			j++
		}
		if j == i {
			if s[i] != '\n' { // escaped newline is a line continuation
				b.WriteByte(s[i])
			}
			continue
		}
		x, _ := strconv.ParseUint(s[i:j], 16, 32)
		r := rune(x)
		if r == 0 || r > 0x10ffff || r >= 0xd800 && r <= 0xdfff {
			r = 0xfffd
		}
		b.WriteRune(r)
		if j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n') {
			j++
		}
		i = j - 1
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
