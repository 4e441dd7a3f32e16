package audit

import (
	"context"
	"testing"
)

// Bodies gives each record's stored body, the bytes its hash covers, in
// both logs; Body re-encodes a record read back to the same bytes.
func TestBodies(t *testing.T) {
	ctx := context.Background()
	sq, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	for name, l := range map[string]interface {
		Log
		Bodies(context.Context, []int64) (map[int64][]byte, error)
	}{"sqlite": sq, "postgres": openPG(t, newPool(t), "r1")} {
		t.Run(name, func(t *testing.T) {
			var recs []*Record
			for i := range 3 {
				r := execRecord(i)
				r.Detail = map[string]string{"z": "1", "a": "<&>"}
				if err := l.Append(ctx, r); err != nil {
					t.Fatal(err)
				}
				recs = append(recs, r)
			}
			got, err := l.Bodies(ctx, []int64{recs[0].Seq, recs[2].Seq, 99})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("%d bodies", len(got))
			}
			for _, r := range []*Record{recs[0], recs[2]} {
				if BodyHash(got[r.Seq]) != r.Hash {
					t.Fatalf("record %d: the body's hash is not the record's", r.Seq)
				}
				back, err := l.Get(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				b, err := Body(back)
				if err != nil || string(b) != string(got[r.Seq]) {
					t.Fatalf("record %d re-encoded:\n%s\nstored:\n%s", r.Seq, b, got[r.Seq])
				}
			}
			rec := Bundle(Who{Tenant: "ops", KeyID: "ops-1"}, "acme", "bnd_0123456789abcdef", "search", "kind=exec", 3, []string{"cap_1"})
			if rec.Kind != KindBundle || rec.Tenant != "acme" || rec.Detail["reader_tenant"] != "ops" || rec.Detail["records"] != "3" {
				t.Fatalf("bundle record %+v", rec)
			}
		})
	}
}
