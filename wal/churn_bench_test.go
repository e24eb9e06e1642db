package wal

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// Churn: 1M series created by 1,000 targets of 1,000 series, then all but
// 1% (every 100th series, spread over every target) go idle and are
// forgotten by series GC.
const (
	churnSeries   = 1_000_000
	churnBatch    = 1000
	churnSurvivor = 100 // one survivor per this many series
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkChurnRetainedHeap measures what the WAL's in-memory state keeps
// after the churn above: the heap in use once the idle series are forgotten
// and the WAL truncated, minus the heap before the Storage was opened,
// divided by the survivors. The survivors' own memSeries and labels (about
// 300 B each) are part of the figure. One op is one whole churn.
func BenchmarkChurnRetainedHeap(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		before := heapInUse()
		clock := newFakeClock()
		s, err := open(filepath.Join(b.TempDir(), "wal"), Options{SegmentSize: 8 << 20}, nil, nil, clock.Now)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		survivors := churn(b, s, clock)
		b.StopTimer()
		after := heapInUse()
		if got := s.ActiveSeries(); got != len(survivors) {
			b.Fatalf("%d series after the churn, want %d", got, len(survivors))
		}
		b.ReportMetric(float64(int64(after)-int64(before))/float64(len(survivors)), "B/survivor")
		runtime.KeepAlive(survivors)
		s.Close()
		b.StartTimer()
	}
}

// churn creates churnSeries series, lets the clock pass the GC age while
// the survivors get one more sample, and truncates. It returns the
// survivors' labels.
func churn(tb testing.TB, s *Storage, clock *fakeClock) []labels.Labels {
	ts := clock.Ms()
	var survivors []labels.Labels
	lsets := make([]labels.Labels, churnBatch)
	for t := range churnSeries / churnBatch {
		for i := range lsets {
			lsets[i] = labels.FromStrings("__name__", "churn_metric", "instance", fmt.Sprintf("pod-%d:8080", t), "i", fmt.Sprint(i))
		}
		a := s.AppenderV2(context.Background())
		for i, ls := range lsets {
			if _, err := a.Append(0, ls, 0, ts, 1, nil, nil, storage.AOptions{}); err != nil {
				tb.Fatal(err)
			}
			if (t*churnBatch+i)%churnSurvivor == 0 {
				survivors = append(survivors, ls)
			}
		}
		if err := a.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
	clock.Advance(s.opts.SeriesGCAge + time.Minute)
	ts = clock.Ms()
	a := s.AppenderV2(context.Background())
	for _, ls := range survivors {
		if _, err := a.Append(0, ls, 0, ts, 2, nil, nil, storage.AOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := a.Commit(); err != nil {
		tb.Fatal(err)
	}
	if err := s.Truncate(); err != nil {
		tb.Fatal(err)
	}
	return survivors
}
