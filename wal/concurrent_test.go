package wal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// Many appenders at once, sharing some series, while truncation deletes
// segments behind them: every sample left in the WAL must refer to a series
// record that precedes it (in the checkpoint or earlier in the segments).
func TestConcurrentAppends(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	w := openTest(t, dir, opts, nil)

	const (
		workers = 6
		batches = 60
		private = 30
	)
	shared := makeSeries(20, "shared")
	var committed atomic.Int64
	base := w.clock.Ms()

	ctx, cancel := context.WithCancel(t.Context())
	truncDone := make(chan struct{})
	go func() {
		defer close(truncDone)
		for ctx.Err() == nil {
			if err := w.Truncate(); err != nil {
				t.Errorf("truncate: %v", err)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := makeSeries(private, fmt.Sprintf("worker_%d", g))
			refs := make([]storage.SeriesRef, private)
			for b := range batches {
				ts := base + int64(b)*1000 + int64(g)
				app := w.AppenderV2(context.Background())
				n := 0
				for i, ls := range own {
					ref, err := app.Append(refs[i], ls, 0, ts, float64(b), nil, nil, storage.AOptions{})
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					refs[i] = ref
					n++
				}
				for _, ls := range shared {
					_, err := app.Append(0, ls, 0, ts, float64(g), nil, nil, storage.AOptions{})
					switch {
					case err == nil:
						n++
					case errors.Is(err, storage.ErrOutOfOrderSample):
					default:
						t.Errorf("append shared: %v", err)
						return
					}
				}
				if b%7 == 3 {
					if err := app.Rollback(); err != nil {
						t.Errorf("rollback: %v", err)
					}
					continue
				}
				if err := app.Commit(); err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				committed.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	cancel()
	<-truncDone

	if got := w.counter(t, "shoal_wal_samples_appended_total", "type", "float"); got != float64(committed.Load()) {
		t.Errorf("samples appended counter = %v, committed %d", got, committed.Load())
	}
	wantSeries := workers*private + len(shared)
	if w.ActiveSeries() != wantSeries {
		t.Errorf("active series = %d, want %d", w.ActiveSeries(), wantSeries)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	first, last := segmentRange(t, dir)
	if first == 0 {
		t.Errorf("no segment was truncated during the test (segments %d-%d)", first, last)
	}

	known := map[chunks.HeadSeriesRef]string{}
	byLabels := map[string]chunks.HeadSeriesRef{}
	addSeries := func(c *walContent, where string) {
		for _, s := range c.series {
			ls := s.Labels.String()
			if _, ok := known[s.Ref]; ok {
				t.Errorf("%s: second series record for ref %d", where, s.Ref)
			}
			if r, ok := byLabels[ls]; ok && r != s.Ref {
				t.Errorf("%s: %s has refs %d and %d", where, ls, r, s.Ref)
			}
			known[s.Ref], byLabels[ls] = ls, s.Ref
		}
	}
	if cp, _, err := wlog.LastCheckpoint(dir); err == nil {
		addSeries(readRecords(t, cp), "checkpoint")
	}
	// Walk the segments record by record, in log order.
	for i := first; i <= last; i++ {
		seg, err := wlog.OpenReadSegment(wlog.SegmentName(dir, i))
		if err != nil {
			t.Fatal(err)
		}
		sr := wlog.NewSegmentBufReader(seg)
		rd := wlog.NewReader(sr)
		dec := record.NewDecoder(labels.NewSymbolTable(), nil)
		for rd.Next() {
			c := &walContent{}
			c.add(t, &dec, rd.Record())
			addSeries(c, fmt.Sprintf("segment %d", i))
			for _, s := range c.samples {
				if _, ok := known[s.Ref]; !ok {
					t.Fatalf("segment %d: sample for ref %d before its series record", i, s.Ref)
				}
			}
		}
		if err := rd.Err(); err != nil {
			t.Fatal(err)
		}
		sr.Close()
	}

	// And everything replays.
	w = openTest(t, dir, opts, w.clock)
	if w.ActiveSeries() != wantSeries {
		t.Errorf("active series after reopen = %d, want %d", w.ActiveSeries(), wantSeries)
	}
}
