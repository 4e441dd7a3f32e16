package testclock

import (
	"sync"
	"testing"
	"time"
)

func TestNowAndAdd(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			c.Add(time.Minute)
			_ = c.Now()
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(10*time.Minute); !got.Equal(want) {
		t.Fatalf("after 10 moves of a minute: %v, want %v", got, want)
	}
}
