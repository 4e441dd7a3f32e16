package main

import (
	"fmt"
	"testing"
)

func TestPreloadArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"none", nil, nil},
		{"modules", []string{"--preload", "numpy,pandas"}, []string{"numpy", "pandas"}},
		{"spaces and empty names dropped", []string{"--preload", " numpy, ,pandas ,"}, []string{"numpy", "pandas"}},
		{"after other arguments", []string{"-x", "--preload", "json"}, []string{"json"}},
		{"flag without a value", []string{"--preload"}, nil},
		{"empty value", []string{"--preload", ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := preloadArgs(tc.args); fmt.Sprint(got) != fmt.Sprint(tc.want) || len(got) != len(tc.want) {
				t.Errorf("preloadArgs(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}
