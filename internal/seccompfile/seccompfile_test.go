package seccompfile

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestDecodeAndAllNames(t *testing.T) {
	var p Profile
	if err := json.Unmarshal([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
		{"name":"read","names":["write","close"],"action":"SCMP_ACT_ALLOW","errnoRet":38,"includes":{"minKernel":"5.8"}},
		{"names":["open"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":3,"op":"SCMP_CMP_EQ"}]}]}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction == nil || *p.DefaultAction != "SCMP_ACT_ERRNO" || len(p.Syscalls) != 2 {
		t.Fatalf("decoded %+v", p)
	}
	r0, r1 := p.Syscalls[0], p.Syscalls[1]
	if got := r0.AllNames(); !slices.Equal(got, []string{"read", "write", "close"}) {
		t.Errorf("AllNames with name and names = %q", got)
	}
	if got := r1.AllNames(); !slices.Equal(got, []string{"open"}) {
		t.Errorf("AllNames with names only = %q", got)
	}
	if *r0.ErrnoRet != 38 || r0.Includes.MinKernel != "5.8" || r1.Args[0] != (Arg{Index: 1, Value: 3, Op: "SCMP_CMP_EQ"}) {
		t.Errorf("rules %+v %+v", r0, r1)
	}
}
