package main

import (
	"log/slog"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// applyMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// ratio × the container's memory limit (cgroup v1 or v2), or × the
// machine's memory where there is none, as Prometheus does with the same
// flags. Near the limit the garbage collector runs more often instead of
// letting the heap grow past it into an OOM kill; far below it nothing
// changes (GOGC still paces the collector). A GOMEMLIMIT in the environment
// wins. A limit that cannot be read is logged, not fatal.
func applyMemoryLimit(enabled bool, ratio float64, logger *slog.Logger) {
	if !enabled {
		return
	}
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		logger.Info("Go soft memory limit from the environment", "GOMEMLIMIT", v)
		return
	}
	limit, err := memlimit.Set(
		memlimit.WithRatio(ratio),
		memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
	)
	if err != nil {
		logger.Warn("Could not set GOMEMLIMIT from the memory limit; the Go runtime runs without a soft memory limit", "err", err)
		return
	}
	logger.Info("Go soft memory limit (GOMEMLIMIT)", "bytes", limit, "ratio", ratio)
}
