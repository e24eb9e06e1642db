//go:build !linux

package handover

import "testing"

// evictFromPageCache leaves the page cache alone where posix_fadvise is not
// available: the benchmarks then read a warm backlog.
func evictFromPageCache(*testing.B, string) {}
