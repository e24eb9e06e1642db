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
	// Either variable in the environment wins over the flag; the test
	// removes both (t.Setenv restores them afterwards).
	for _, k := range []string{"GOMEMLIMIT", "AUTOMEMLIMIT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	detected, err := memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)()
	if err != nil || detected == 0 {
		t.Fatalf("no memory limit detected (cgroup, then the machine's memory): %d, %v", detected, err)
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

	// A GOMEMLIMIT in the environment wins: the flag leaves the limit alone.
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(math.MaxInt64)
	applyMemoryLimit(true, 0.5, discard)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT in the environment the flag changed the limit to %d", got)
	}
}
