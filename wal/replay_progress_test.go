package wal

import (
	"fmt"
	"slices"
	"testing"
)

// TestOnReplayReportsProgress: reopening a WAL of several segments calls
// OnReplay with "k of n" for each, in order, before Open returns.
func TestOnReplayReportsProgress(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	w := openTest(t, dir, smallOpts(), clock)
	series := makeSeries(200, "m")
	for i := range 200 {
		appendFloats(t, w.Storage, series, clock.Ms()+int64(i), float64(i))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	first, last := segmentRange(t, dir)
	if last-first < 2 {
		t.Fatalf("want several segments, have %d..%d", first, last)
	}
	var got []string
	opts := smallOpts()
	opts.OnReplay = func(k, n int) { got = append(got, fmt.Sprintf("%d/%d", k, n)) }
	openTest(t, dir, opts, clock)
	// Every segment on disk is replayed (Open may have added an empty one).
	n := len(got)
	if n < last-first+1 {
		t.Fatalf("%d OnReplay calls for segments %d..%d", n, first, last)
	}
	var want []string
	for k := 1; k <= n; k++ {
		want = append(want, fmt.Sprintf("%d/%d", k, n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("OnReplay calls %v, want %v", got, want)
	}
}
