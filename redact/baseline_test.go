package redact

// baselineRedact is the plain implementation the benchmarks compare with:
// every rule's regular expression over the whole text, no keyword prefilter
// and no windows; the same checks, merging and replacement. Rules with
// keywords that a match need not contain (rule.near) find matches only near
// such a keyword; the baseline, which has no keywords, skips them.
func baselineRedact(r *Redactor, text []byte) ([]byte, Counts) {
	var cands []cand
	for _, ru := range r.rules {
		if ru.near != nil {
			continue
		}
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

// withoutNear is r without the rules that the baseline skips.
func withoutNear(r *Redactor) *Redactor {
	var rules []*rule
	for _, ru := range r.rules {
		if ru.near == nil {
			c := *ru
			rules = append(rules, &c)
		}
	}
	return build(rules)
}

// gitleaksStyle redacts as gitleaks' detector scans: one keyword pass, then
// each rule with a keyword present runs over the whole text.
func gitleaksStyle(r *Redactor, text []byte) []cand {
	_, hits := r.ac.scan(text, 0, 0, r.lens, nil)
	seen := map[*rule]bool{}
	var cands []cand
	for _, h := range hits {
		for _, ref := range r.kws[h.kw].refs {
			if ru := ref.rule; !seen[ru] && ru.near == nil {
				seen[ru] = true
				for _, m := range ru.re.FindAllSubmatchIndex(text, -1) {
					cands = r.accept(text, 0, m, ru, cands)
				}
			}
		}
	}
	return merge(cands)
}
