package agent

import (
	"testing"
	"time"
)

// TestLifetimeMoves: the daemon can move the agent's own deadline, later and earlier,
// and the agent stops at the new one.
func TestLifetimeMoves(t *testing.T) {
	lt := NewLifetime(time.Now().Add(time.Second))
	c, _ := startAgent(t, Options{Lifetime: lt})
	if err := c.SetLifetime(ctxT(t), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("past its first deadline, moved later, the agent does not answer: %v", err)
	}
	if err := c.SetLifetime(ctxT(t), time.Now().Add(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Ping(ctxT(t)) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the agent still answers 5 s after its deadline was moved to 200 ms from now")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
