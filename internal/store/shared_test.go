package store

import "testing"

func TestNumbered(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`a = ? AND b = ? LIMIT ?`, `a = $1 AND b = $2 LIMIT $3`},
		{`x <= ?1 OR y <= ?1`, `x <= $1 OR y <= $1`},
		{`day = ?2 AND tenant = ?1`, `day = $2 AND tenant = $1`},
		{`id = ?`, `id = $1`},
	} {
		if got := numbered(c.in); got != c.want {
			t.Errorf("numbered(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
