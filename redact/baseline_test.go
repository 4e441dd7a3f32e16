package redact

// baselineRedact is the plain implementation the benchmarks compare with:
// every rule's regular expression over the whole text, no keyword prefilter
// and no windows; the same checks, merging and replacement.
func baselineRedact(r *Redactor, text []byte) ([]byte, Counts) {
	var cands []cand
	for _, ru := range r.rules {
		for _, m := range ru.re.FindAllSubmatchIndex(text, -1) {
			cands = r.accept(text, 0, m, ru, cands)
		}
	}
	if len(cands) == 0 {
		return text, nil
	}
	c := Counts{}
	out := make([]byte, 0, len(text))
	pos := int64(0)
	for _, iv := range merge(cands) {
		out = append(out, text[pos:iv.start]...)
		out = r.appendMarker(out, iv, c)
		pos = iv.end
	}
	return append(out, text[pos:]...), c
}
