package redact

// automaton is an Aho–Corasick keyword matcher compiled to a DFA over byte
// classes. Matching ignores ASCII case: keywords are stored lower-cased and
// every input byte is folded before the lookup. Bytes that occur in no
// keyword share class 0, which keeps the transition table small (states ×
// classes) and the inner loop to one table load per byte.
type automaton struct {
	class [256]uint8
	// delta[state*stride+class] is the next state's offset (state*stride);
	// a state where some keyword ends is stored as -offset-1.
	delta  []int32
	stride int32
	// out[state] lists the keywords that end in that state (its own and
	// those reached through failure links).
	out [][]int32
}

// hit is one keyword occurrence: kw (index into the keyword table) starts at
// absolute offset pos.
type hit struct {
	pos int64
	kw  int32
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// newAutomaton builds the matcher; keywords must be non-empty and already
// lower-cased.
func newAutomaton(keywords []string) *automaton {
	a := &automaton{}
	// Byte classes: one per distinct (folded) byte used by some keyword.
	var used [256]bool
	for _, k := range keywords {
		for i := 0; i < len(k); i++ {
			used[k[i]] = true
		}
	}
	n := 1
	var classOf [256]uint8
	for b := 0; b < 256; b++ {
		if used[b] {
			classOf[b] = uint8(n)
			n++
		}
	}
	if n > 256 {
		panic("redact: too many distinct keyword bytes")
	}
	for b := 0; b < 256; b++ {
		a.class[b] = classOf[lower(byte(b))]
	}
	a.stride = int32(n)

	// Trie.
	type node struct {
		next map[uint8]int32
		fail int32
		out  []int32
	}
	nodes := []node{{next: map[uint8]int32{}}}
	for id, k := range keywords {
		s := int32(0)
		for i := 0; i < len(k); i++ {
			c := classOf[k[i]]
			t, ok := nodes[s].next[c]
			if !ok {
				t = int32(len(nodes))
				nodes = append(nodes, node{next: map[uint8]int32{}})
				nodes[s].next[c] = t
			}
			s = t
		}
		nodes[s].out = append(nodes[s].out, int32(id))
	}

	// Failure links and the DFA, breadth first.
	delta := make([]int32, len(nodes)*n)
	queue := make([]int32, 0, len(nodes))
	for c := 0; c < n; c++ {
		if t, ok := nodes[0].next[uint8(c)]; ok {
			nodes[t].fail = 0
			delta[c] = t
			queue = append(queue, t)
		} else {
			delta[c] = 0
		}
	}
	for qi := 0; qi < len(queue); qi++ {
		s := queue[qi]
		f := nodes[s].fail
		nodes[s].out = append(nodes[s].out, nodes[f].out...)
		for c := 0; c < n; c++ {
			if t, ok := nodes[s].next[uint8(c)]; ok {
				nodes[t].fail = delta[int(f)*n+c]
				delta[int(s)*n+c] = t
				queue = append(queue, t)
			} else {
				delta[int(s)*n+c] = delta[int(f)*n+c]
			}
		}
	}
	// Encode: state index -> offset; output states negative.
	a.out = make([][]int32, len(nodes))
	for i := range nodes {
		a.out[i] = nodes[i].out
	}
	a.delta = make([]int32, len(delta))
	for i, t := range delta {
		v := t * int32(n)
		if len(nodes[t].out) > 0 {
			v = -v - 1
		}
		a.delta[i] = v
	}
	return a
}

// scan runs the automaton over text, starting in state (an offset as
// returned by an earlier scan, 0 at the start), and appends a hit for every
// keyword occurrence that ends inside text. base is the absolute offset of
// text[0]; lens gives each keyword's length. It returns the state to resume
// from and the extended hits.
func (a *automaton) scan(text []byte, state int32, base int64, lens []int32, hits []hit) (int32, []hit) {
	delta, class := a.delta, &a.class
	s := state
	for i := 0; i < len(text); i++ {
		v := delta[s+int32(class[text[i]])]
		if v < 0 {
			v = -v - 1
			for _, kw := range a.out[v/a.stride] {
				hits = append(hits, hit{pos: base + int64(i+1) - int64(lens[kw]), kw: kw})
			}
		}
		s = v
	}
	return s, hits
}
