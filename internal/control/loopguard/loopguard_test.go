package loopguard

import (
	"context"
	"testing"
	"time"
)

func TestThirdIdenticalCallRefused(t *testing.T) {
	g := New()
	for i := 0; i < 2; i++ {
		if refuse, _ := check(g, "s", "call", 3); refuse {
			t.Fatalf("call %d refused", i+1)
		}
		g.Record(context.Background(), "s", "call", "out")
	}
	if refuse, n := check(g, "s", "call", 3); !refuse || n != 2 {
		t.Fatalf("third identical call: refuse %v after %d", refuse, n)
	}
	// Other sessions, other calls and threshold 0 pass.
	if refuse, _ := check(g, "s2", "call", 3); refuse {
		t.Fatal("another session refused")
	}
	if refuse, _ := check(g, "s", "other", 3); refuse {
		t.Fatal("another call refused")
	}
	if refuse, _ := check(g, "s", "call", 0); refuse {
		t.Fatal("guard off refused")
	}
	if refuse, _ := check(g, "", "call", 3); refuse {
		t.Fatal("no session refused")
	}
}

func TestDifferentOutcomeOrCallResets(t *testing.T) {
	g := New()
	g.Record(context.Background(), "s", "call", "a")
	g.Record(context.Background(), "s", "call", "b") // a changed outcome starts a new streak
	if refuse, n := check(g, "s", "call", 3); refuse || n != 1 {
		t.Fatalf("refuse %v n %d", refuse, n)
	}
	g.Record(context.Background(), "s", "call", "b")
	g.Record(context.Background(), "s", "x", "b")
	g.Record(context.Background(), "s", "call", "b") // another call in between breaks the row
	if refuse, _ := check(g, "s", "call", 3); refuse {
		t.Fatal("refused after an intervening call")
	}
	g.Record(context.Background(), "s", "call", "b")
	if refuse, _ := check(g, "s", "call", 3); !refuse {
		t.Fatal("not refused after two in a row")
	}
	g.now = func() time.Time { return time.Now().Add(time.Hour) }
	g.Forget(time.Minute)
	if refuse, _ := check(g, "s", "call", 3); refuse {
		t.Fatal("forgotten session still refused")
	}
}

func check(g *Guard, session, call string, threshold int) (bool, int) {
	refuse, n, err := g.Check(context.Background(), session, call, threshold)
	if err != nil {
		panic(err)
	}
	return refuse, n
}
