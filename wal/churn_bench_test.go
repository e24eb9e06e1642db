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

// BenchmarkWALBytesPerSample reports the disk the WAL takes per sample with
// the default options (snappy): 10k series (200 names on 50 hosts) scraped
// 100 times with counter- and gauge-like values, series records included.
// The README's outage arithmetic uses it.
func BenchmarkWALBytesPerSample(b *testing.B) {
	const n, rounds = 10000, 100
	ls := make([]labels.Labels, n)
	for i := range ls {
		ls[i] = labels.FromStrings("__name__", fmt.Sprintf("metric_%d_total", i%200), "instance", fmt.Sprintf("host-%d:9100", i/200), "job", "node")
	}
	for b.Loop() {
		clock := newFakeClock()
		dir := filepath.Join(b.TempDir(), "wal")
		s, err := open(dir, Options{}, nil, nil, clock.Now)
		if err != nil {
			b.Fatal(err)
		}
		refs := make([]storage.SeriesRef, n)
		for r := range rounds {
			clock.Advance(15 * time.Second)
			a := s.AppenderV2(context.Background())
			for i := range ls {
				v := float64(r*(i%17+1)) * 1.5 // counters of different speeds
				if i%3 == 0 {
					v = float64(i % 5) // gauges that rarely move
				}
				ref, err := a.Append(refs[i], ls[i], 0, clock.Ms()+int64(i%1000), v, nil, nil, storage.AOptions{})
				if err != nil {
					b.Fatal(err)
				}
				refs[i] = ref
			}
			if err := a.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		_, bytes := dirUsage(dir)
		b.ReportMetric(float64(bytes)/float64(n*rounds), "B/sample")
		s.Close()
	}
}
