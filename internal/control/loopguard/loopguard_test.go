package loopguard

import (
	"testing"
	"time"
)

func TestThirdIdenticalCallRefused(t *testing.T) {
	g := New()
	for i := 0; i < 2; i++ {
		if refuse, _ := g.Check("s", "call", 3); refuse {
			t.Fatalf("call %d refused", i+1)
		}
		g.Record("s", "call", "out")
	}
	if refuse, n := g.Check("s", "call", 3); !refuse || n != 2 {
		t.Fatalf("third identical call: refuse %v after %d", refuse, n)
	}
	// Other sessions, other calls and threshold 0 pass.
	if refuse, _ := g.Check("s2", "call", 3); refuse {
		t.Fatal("another session refused")
	}
	if refuse, _ := g.Check("s", "other", 3); refuse {
		t.Fatal("another call refused")
	}
	if refuse, _ := g.Check("s", "call", 0); refuse {
		t.Fatal("guard off refused")
	}
	if refuse, _ := g.Check("", "call", 3); refuse {
		t.Fatal("no session refused")
	}
}

func TestDifferentOutcomeOrCallResets(t *testing.T) {
	g := New()
	g.Record("s", "call", "a")
	g.Record("s", "call", "b") // a changed outcome starts a new streak
	if refuse, n := g.Check("s", "call", 3); refuse || n != 1 {
		t.Fatalf("refuse %v n %d", refuse, n)
	}
	g.Record("s", "call", "b")
	g.Record("s", "x", "b")
	g.Record("s", "call", "b") // another call in between breaks the row
	if refuse, _ := g.Check("s", "call", 3); refuse {
		t.Fatal("refused after an intervening call")
	}
	g.Record("s", "call", "b")
	if refuse, _ := g.Check("s", "call", 3); !refuse {
		t.Fatal("not refused after two in a row")
	}
	g.now = func() time.Time { return time.Now().Add(time.Hour) }
	g.Forget(time.Minute)
	if refuse, _ := g.Check("s", "call", 3); refuse {
		t.Fatal("forgotten session still refused")
	}
}
