package redact

import (
	"cmp"
	"regexp"
	"slices"
	"sort"
)

// Evaluation. Each keyword occurrence makes a task for each rule of the
// keyword. A rule whose matches are short runs once per task: its anchored
// regex at the keyword, or its regex over the window around it. A rule whose
// window is wide is evaluated per block of text instead (blockSize bytes at
// a fixed absolute offset), all its tasks in the block together: task by
// task while that reads little (a few tasks of a window rule; an anchored
// rule within a budget), else in one pass: a window rule over the block
// with its margins, an anchored rule as an unanchored search from the next
// task on. Either way every byte of text is read a bounded number of times
// per rule, however dense the keywords (a text of "curl curl curl ..." or
// "eyeyey..." used to cost the whole window for each occurrence), and the
// result still depends only on the text near each block: the Writer
// evaluates a block once its text is complete, with the same result as
// Bytes.

// blockSize is the span of text whose tasks of a wide rule are evaluated
// together.
const blockSize = 1024

// anchoredSpan: an anchored rule whose matches may be longer than this runs
// per block (window rules always do).
const anchoredSpan = 128

// nestedBudget bounds, per rule and block, the text that the tasks of an
// anchored rule run one by one may read (as a multiple of the block's text
// and its margin).
const nestedBudget = 2

// readHook, when set (by tests), is told how many bytes each regex run
// reads.
var readHook func(n int)

// task is a keyword occurrence (of keyword kw at absolute offset pos) for
// one rule.
type task struct {
	pos  int64
	kw   int32
	rule int32
}

// setMode decides how ru runs (per task or per block) and prepares it.
func (ru *rule) setMode() {
	ru.maxK = 0
	for _, k := range ru.keywords {
		ru.maxK = max(ru.maxK, len(k))
	}
	span := ru.before + ru.maxK + ru.after + 1
	switch {
	case ru.anchored:
		ml := maxMatchLen(ru.rest)
		ru.maxLen = ml
		ru.block = ml < 0 || ml > anchoredSpan
		if ru.block && ru.ure == nil {
			ru.ure = regexp.MustCompile(ru.rest)
		}
	default:
		// A cheap test per occurrence (pre) keeps the rule per task.
		ru.block = ru.pre == nil
	}
	// A block with few tasks of a window rule runs them one by one (as
	// cheap, and exactly as a lone occurrence always runs); an anchored
	// rule does so within a budget (evalAnchoredBlock).
	ru.sparse = (blockSize + span) / span
	if ru.anchored {
		ru.sparse = 0
	}
}

// blockOf is the start of the block of absolute offset p.
func blockOf(p int64) int64 { return p - p%blockSize }

// tasks appends the tasks of hits (text holds the absolute range from base
// on, including every hit's keyword).
func (r *Redactor) tasks(text []byte, base int64, hits []hit, out []task) []task {
	for _, h := range hits {
		kw := &r.kws[h.kw]
		for _, ref := range kw.refs {
			if ref.exacts != nil {
				got := text[h.pos-base : h.pos-base+int64(len(kw.text))]
				if !slices.ContainsFunc(ref.exacts, func(e string) bool { return string(got) == e }) {
					continue
				}
			}
			out = append(out, task{pos: h.pos, kw: h.kw, rule: int32(ref.rule.idx)})
		}
	}
	return out
}

// ready: t can be evaluated once text up to end is known.
func (r *Redactor) ready(t task, end int64) bool {
	ru := r.rules[t.rule]
	if ru.block {
		return blockOf(t.pos)+blockSize+int64(ru.maxK+ru.after+ru.ext)+1 <= end
	}
	return t.pos+int64(len(r.kws[t.kw].text)+ru.after+ru.ext)+1 <= end
}

// regionStart is the first byte that evaluating t may read (before
// clipping).
func (r *Redactor) regionStart(t task) int64 {
	ru := r.rules[t.rule]
	switch {
	case !ru.block:
		return t.pos - int64(ru.before) - 1
	case ru.anchored:
		return t.pos - 1
	}
	return blockOf(t.pos) - int64(ru.before) - 1
}

// evalTasks evaluates tasks and appends the ranges to redact. text holds the
// absolute range [base, hi); windows are clipped to it (the caller
// guarantees that clipping happens only at the true start or end of the
// stream, and that every block with a task comes with all its tasks).
func (r *Redactor) evalTasks(text []byte, base, hi int64, ts []task, out []cand) []cand {
	var blocked []task
	for _, t := range ts {
		if r.rules[t.rule].block {
			blocked = append(blocked, t)
			continue
		}
		out = r.evalTask(text, base, hi, t, out)
	}
	slices.SortFunc(blocked, func(a, b task) int {
		if c := cmp.Compare(a.rule, b.rule); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	for i := 0; i < len(blocked); {
		j := i + 1
		for j < len(blocked) && blocked[j].rule == blocked[i].rule && blockOf(blocked[j].pos) == blockOf(blocked[i].pos) {
			j++
		}
		ru := r.rules[blocked[i].rule]
		if j-i <= ru.sparse {
			for _, t := range blocked[i:j] {
				out = r.evalTask(text, base, hi, t, out)
			}
		} else if ru.anchored {
			out = r.evalAnchoredBlock(text, base, hi, ru, blocked[i:j], out)
		} else {
			out = r.evalWindowBlock(text, base, hi, ru, blocked[i:j], out)
		}
		i = j
	}
	return out
}

// evalTask runs t's rule over t's window.
func (r *Redactor) evalTask(text []byte, base, hi int64, t task, out []cand) []cand {
	ru := r.rules[t.rule]
	kw := &r.kws[t.kw]
	k := int64(len(kw.text))
	p := t.pos
	ws := max(p-int64(ru.before)-1, base)
	we := min(p+k+int64(ru.after+ru.ext)+1, hi)
	win := text[ws-base : we-base]
	ks := int(p - ws)
	ke := ks + int(k)
	if ru.pre != nil && !ru.pre(win, ks, ke) {
		return out
	}
	rend := min(ke+ru.after+1, len(win))
	for _, l := range ru.need {
		if !containsFold(win[:rend], l) {
			return out
		}
	}
	if readHook != nil {
		if n := rend - ks; ru.anchored && ru.maxLen >= 0 {
			readHook(min(n, ru.maxLen+1)) // an anchored regex reads no further
		} else {
			readHook(rend)
		}
	}
	if ru.anchored {
		m := ru.are.FindSubmatchIndex(win[ks:rend])
		if m == nil {
			return out
		}
		for i := range m {
			if m[i] >= 0 {
				m[i] += ks
			}
		}
		return r.accept(win, ws, m, ru, out)
	}
	near := ru.near[kw.text]
	for _, m := range ru.re.FindAllSubmatchIndex(win[:rend], -1) {
		if ru.source != "" && (m[0] == 0 && ws > base || m[1] == rend && ws+int64(rend) < hi) {
			continue // may be cut by the window
		}
		if m[0] <= ks && m[1] >= ke || near {
			out = r.accept(win, ws, m, ru, out)
		}
	}
	return out
}

// evalWindowBlock runs a window rule once over the windows of its tasks ts
// (sorted, all in one block) and keeps the matches that a task's window
// holds and that contain the task's keyword (or any, for a keyword that the
// expression does not spell).
func (r *Redactor) evalWindowBlock(text []byte, base, hi int64, ru *rule, ts []task, out []cand) []cand {
	bs := blockOf(ts[0].pos)
	be := bs + blockSize
	rs := max(bs-int64(ru.before)-1, base)
	re := min(be+int64(ru.maxK+ru.after)+1, hi)
	we := min(re+int64(ru.ext), hi)
	win := text[rs-base : we-base]
	rend := int(re - rs)
	for _, l := range ru.need {
		if !containsFold(win[:rend], l) {
			return out
		}
	}
	if readHook != nil {
		readHook(rend)
	}
	for _, m := range ru.re.FindAllSubmatchIndex(win[:rend], -1) {
		if ru.source != "" && (m[0] == 0 && rs > base || m[1] == rend && re < hi) {
			continue // may be cut by the region
		}
		if r.owned(ru, ts, rs+int64(m[0]), rs+int64(m[1])) {
			out = r.accept(win, rs, m, ru, out)
		}
	}
	return out
}

// owned: some task of ts has a window that holds [ms, me), and its keyword
// lies inside it or the rule does not spell the keyword.
func (r *Redactor) owned(ru *rule, ts []task, ms, me int64) bool {
	before, after := int64(ru.before), int64(ru.after)
	lo := me - int64(ru.maxK) - after - 1 // the window must reach me
	if ru.near == nil {
		lo = max(lo, ms) // the keyword must lie inside
	}
	i := sort.Search(len(ts), func(i int) bool { return ts[i].pos >= lo })
	for ; i < len(ts) && ts[i].pos <= ms+before+1; i++ {
		t := ts[i]
		kw := &r.kws[t.kw]
		k := int64(len(kw.text))
		if t.pos+k+after+1 < me {
			continue
		}
		if ru.near[kw.text] || t.pos >= ms && t.pos+k <= me {
			return true
		}
	}
	return false
}

// evalAnchoredBlock runs an anchored rule whose matches may be long over
// its tasks ts in a block: one by one (anchored at each keyword, exactly as
// a lone task) while the text they may read stays within a budget of a few
// times the block's text, then the rest as one unanchored search from the
// next task on (searchFrom), which reads the text once however many tasks
// there are.
func (r *Redactor) evalAnchoredBlock(text []byte, base, hi int64, ru *rule, ts []task, out []cand) []cand {
	be := blockOf(ts[0].pos) + blockSize
	budget := nestedBudget * (be + int64(ru.maxK+ru.after) + 1 - ts[0].pos)
	last := int64(-1)
	for i, t := range ts {
		if t.pos == last {
			continue // another keyword of the rule at the same place
		}
		last = t.pos
		cost := int64(len(r.kws[t.kw].text) + ru.after + 1)
		if ru.maxLen >= 0 {
			cost = min(cost, int64(ru.maxLen+1))
		}
		if budget < cost {
			return r.searchFrom(text, base, hi, ru, ts[i:], out)
		}
		budget -= cost
		out = r.evalTask(text, base, hi, t, out)
	}
	return out
}

// searchFrom runs an anchored rule over its tasks ts (sorted, in one block)
// as one unanchored search from the first: a match that starts at a task is
// the task's anchored match (one longer than the task's own reach is run as
// the task); a task not at a match and not inside one has none; a task
// inside a match of the same rule (a keyword inside a long token) is left
// to the match that holds it.
func (r *Redactor) searchFrom(text []byte, base, hi int64, ru *rule, ts []task, out []cand) []cand {
	first := ts[0].pos
	be := blockOf(first) + blockSize
	rs := max(first-1, base)
	re := min(be+int64(ru.maxK+ru.after)+1, hi)
	we := min(re+int64(ru.ext), hi)
	win := text[rs-base : we-base]
	off := int(first - rs)
	if readHook != nil {
		readHook(int(re-rs) - off)
	}
	ms := ru.ure.FindAllSubmatchIndex(win[off:int(re-rs)], -1)
	j := 0
	last := int64(-1)
	for _, t := range ts {
		if t.pos == last {
			continue
		}
		last = t.pos
		for j < len(ms) && rs+int64(off+ms[j][0]) < t.pos {
			j++
		}
		if j == len(ms) || rs+int64(off+ms[j][0]) != t.pos {
			continue
		}
		m := ms[j]
		j++
		for i := range m {
			if m[i] >= 0 {
				m[i] += off
			}
		}
		if rs+int64(m[1]) > t.pos+int64(len(r.kws[t.kw].text)+ru.after)+1 {
			out = r.evalTask(text, base, hi, t, out) // longer than its own reach
			continue
		}
		out = r.accept(win, rs, m, ru, out)
	}
	return out
}

// find returns the ranges to redact in b, merged.
func (r *Redactor) find(b []byte) []cand {
	_, hits := r.ac.scan(b, 0, 0, r.lens, nil)
	if len(hits) == 0 {
		return nil
	}
	ts := r.tasks(b, 0, hits, nil)
	return merge(r.evalTasks(b, 0, int64(len(b)), ts, nil))
}
