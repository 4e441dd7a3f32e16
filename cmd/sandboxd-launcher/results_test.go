package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

func TestResultCaps(t *testing.T) {
	png := func(n int) []byte { return append(append([]byte(nil), pngMagic...), make([]byte, n-len(pngMagic))...) }
	caps := jobproto.SessionInit{MaxTextBytes: 8, MaxFigureBytes: 16, MaxFigures: 2}
	repr := func(text string) kmsg { return kmsg{T: "result", Kind: jobproto.ResultRepr, Text: text} }
	figure := func(data []byte) kmsg { return kmsg{T: "result", Kind: jobproto.ResultPNG, Data: data} }
	// dropped stands for a result admit drops.
	var dropped *jobproto.RichResult
	for _, tc := range []struct {
		name string
		msgs []kmsg
		want []*jobproto.RichResult
	}{
		{
			name: "repr within the cap",
			msgs: []kmsg{repr("12345678")},
			want: []*jobproto.RichResult{{Kind: "repr", Text: "12345678"}},
		},
		{
			name: "repr over the cap is cut",
			msgs: []kmsg{repr("123456789")},
			want: []*jobproto.RichResult{{Kind: "repr", Text: "12345678", Truncated: true}},
		},
		{
			name: "a cut does not split a UTF-8 sequence",
			msgs: []kmsg{repr("1234567é")},
			want: []*jobproto.RichResult{{Kind: "repr", Text: "1234567", Truncated: true}},
		},
		{
			name: "invalid UTF-8 is replaced",
			msgs: []kmsg{repr("a\xffb")},
			want: []*jobproto.RichResult{{Kind: "repr", Text: "a\uFFFDb"}},
		},
		{
			name: "the kernel's own truncation is kept",
			msgs: []kmsg{{Kind: jobproto.ResultTable, Text: "t", Truncated: true}},
			want: []*jobproto.RichResult{{Kind: "table", Text: "t", Truncated: true}},
		},
		{
			name: "a figure within the caps",
			msgs: []kmsg{figure(png(16))},
			want: []*jobproto.RichResult{{Kind: "image/png", Data: png(16)}},
		},
		{
			name: "a figure over the byte cap",
			msgs: []kmsg{figure(png(17))},
			want: []*jobproto.RichResult{{Kind: "image/png", Omitted: "the figure is 17 bytes as PNG, over the 16-byte cap"}},
		},
		{
			name: "a figure that is not a PNG",
			msgs: []kmsg{figure([]byte("GIF89a"))},
			want: []*jobproto.RichResult{{Kind: "image/png", Omitted: "the figure is not a PNG image"}},
		},
		{
			name: "the kernel's reason for omitting a figure is kept, capped",
			msgs: []kmsg{{Kind: jobproto.ResultPNG, Data: png(16), Omitted: strings.Repeat("x", 2000)}},
			want: []*jobproto.RichResult{{Kind: "image/png", Omitted: strings.Repeat("x", 1024)}},
		},
		{
			name: "figures past the count cap lose their data; omitted ones count",
			msgs: []kmsg{{Kind: jobproto.ResultPNG, Omitted: "too big"}, figure(png(9)), figure(png(9))},
			want: []*jobproto.RichResult{
				{Kind: "image/png", Omitted: "too big"},
				{Kind: "image/png", Data: png(9)},
				{Kind: "image/png", Omitted: "the call made more than 2 figures"},
			},
		},
		{
			name: "unknown kinds are dropped",
			msgs: []kmsg{{Kind: "text/html", Text: "<b>"}, repr("r")},
			want: []*jobproto.RichResult{dropped, {Kind: "repr", Text: "r"}},
		},
		{
			name: "results past MaxFigures+4 are dropped, unknown kinds counted",
			msgs: []kmsg{{Kind: "x"}, repr("1"), repr("2"), repr("3"), repr("4"), repr("5"), repr("6")},
			want: []*jobproto.RichResult{dropped, {Kind: "repr", Text: "1"}, {Kind: "repr", Text: "2"}, {Kind: "repr", Text: "3"}, {Kind: "repr", Text: "4"}, {Kind: "repr", Text: "5"}, dropped},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &resultCaps{init: &caps}
			for i, m := range tc.msgs {
				r, ok := c.admit(m)
				var got *jobproto.RichResult
				if ok {
					got = &r
				}
				if !reflect.DeepEqual(got, tc.want[i]) {
					t.Errorf("result %d: admit = %s, want %s", i, show(got), show(tc.want[i]))
				}
			}
		})
	}
}

func show(r *jobproto.RichResult) string {
	if r == nil {
		return "dropped"
	}
	return fmt.Sprintf("%+v", *r)
}

func TestCapString(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abc", 3, "abc"},
		{"cut", "abcdef", 3, "abc"},
		{"zero", "abc", 0, ""},
		{"before a two-byte rune", "aé", 2, "a"},
		{"after a two-byte rune", "aéb", 3, "aé"},
		{"inside a four-byte rune", "a😀", 4, "a"},
		{"invalid bytes count as the replacement's three", "\xff\xff", 4, "\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := capString(tc.s, tc.n); got != tc.want {
				t.Errorf("capString(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}
