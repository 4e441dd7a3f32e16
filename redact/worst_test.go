package redact

import (
	"sort"
	"strings"
	"testing"
)

// Worst cases: text dense with one keyword. Each keyword occurrence used to
// cost its rules' whole windows (up to 16 KiB each), so a text of
// "curl=curl=..." or "eyeyey..." cost a few hundred microseconds per byte
// and stalled the fuzzers. Rules with wide windows now run once per block
// (eval.go): the bytes that regexes read stay within a small multiple of
// the text, whatever the keyword.

// floods are the worst shapes: each keyword repeated, glued or separated.
func floods(r *Redactor, size int) map[string][]byte {
	out := map[string][]byte{}
	for _, k := range r.kws {
		for _, sep := range []string{"", " ", "="} {
			unit := k.text + sep
			out[unit] = []byte(strings.Repeat(unit, size/len(unit)))
		}
	}
	return out
}

// readPerByte: the bytes regexes read redacting in, per byte of in.
func readPerByte(r *Redactor, in []byte) float64 {
	n := 0
	readHook = func(k int) { n += k }
	defer func() { readHook = nil }()
	r.Bytes(in)
	return float64(n) / float64(len(in))
}

func TestWorstCaseIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	r := Default()
	type shape struct {
		unit string
		per  float64
	}
	// Under the race detector the same shapes at a quarter of the size:
	// the bound is per byte, so the assertions hold as they are.
	small, large := 8<<10, 64<<10
	if raceOn {
		small, large = 2<<10, 16<<10
	}
	var worst []shape
	for unit, in := range floods(r, small) {
		worst = append(worst, shape{unit, readPerByte(r, in)})
	}
	sort.Slice(worst, func(i, j int) bool { return worst[i].per > worst[j].per })
	for _, s := range worst[:10] {
		t.Logf("%8.1f bytes read per byte: %q", s.per, s.unit)
	}
	// The bound is per rule of the keyword: a window or a match of each
	// rule, a few times over.
	if worst[0].per > 128 {
		t.Errorf("%q: %.0f bytes read per byte of text", worst[0].unit, worst[0].per)
	}
	// And it does not grow with the text.
	perSmall, perLarge := readPerByte(r, floods(r, small)[worst[0].unit]), readPerByte(r, floods(r, large)[worst[0].unit])
	if perLarge > 1.2*perSmall {
		t.Errorf("%q: %.0f bytes read per byte at %d KiB, %.0f at %d KiB", worst[0].unit, perSmall, small>>10, perLarge, large>>10)
	}
}

// worstShapes are the texts that used to be slowest (a few hundred
// microseconds per byte: curl=, ey, jira, linkedin, auth=) and the ones that
// read the most now (hvs., hf_).
var worstShapes = []string{"curl=", "ey", "eyJ", "jira", "linkedin", "atatt3", "auth=", "token: ", "hvs.", "hf_", ":AA", "T3BlbkFJ", "kind: secret\ndata:\n  a: "}

// BenchmarkWorstCase redacts 64 KiB of each worst shape.
func BenchmarkWorstCase(b *testing.B) {
	r := Default()
	for _, unit := range worstShapes {
		in := []byte(strings.Repeat(unit, (64<<10)/len(unit)))
		b.Run(strings.TrimSpace(strings.ReplaceAll(unit, "\n", "_")), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			c := cpuTime()
			for b.Loop() {
				r.Bytes(in)
			}
			reportCPU(b, c, len(in))
		})
	}
}
