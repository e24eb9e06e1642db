package main

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestMemoryLimitIsTheRatioOfTheDetectedLimit(t *testing.T) {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		t.Skip("GOMEMLIMIT is set in the environment, which wins over --auto-gomemlimit")
	}
	if _, ok := os.LookupEnv("AUTOMEMLIMIT"); ok {
		t.Skip("AUTOMEMLIMIT is set in the environment")
	}
	detected, err := memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)()
	if err != nil || detected == 0 {
		t.Skipf("no memory limit detectable here: %v", err)
	}
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	discard := slog.New(slog.DiscardHandler)

	debug.SetMemoryLimit(math.MaxInt64)
	applyMemoryLimit(false, 0.5, discard)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("--no-auto-gomemlimit changed the limit to %d", got)
	}

	applyMemoryLimit(true, 0.5, discard)
	want := int64(float64(detected) * 0.5)
	if got := debug.SetMemoryLimit(-1); got < want-want/100 || got > want+want/100 {
		t.Errorf("GOMEMLIMIT = %d with ratio 0.5 of the detected %d, want about %d", got, detected, want)
	}
}
