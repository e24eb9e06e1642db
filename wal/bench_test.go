package wal

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/agent"
	"github.com/prometheus/prometheus/util/compression"
)

// BenchmarkAppend appends scrape-like batches (1k series, one sample each,
// refs cached by the caller as the scrape loop does, metadata on every
// sample) and commits each batch; one op is one batch. The prometheus-agent
// sub-benchmark runs Prometheus' own tsdb/agent appender over the same
// series and samples, with the same compression, as a baseline. With
// families=200 the series belong to 200 metric families of 5 series each,
// every family with its own help text (as a scrape cache holds them);
// otherwise all share one.
func BenchmarkAppend(b *testing.B) {
	const seriesPerBatch = 1000
	series := makeSeries(seriesPerBatch, "node_cpu_seconds_total")
	oneMeta := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Seconds the CPUs spent in each mode."}
	for _, families := range []int{1, 200} {
		metas := make([]metadata.Metadata, seriesPerBatch)
		for i := range metas {
			metas[i] = oneMeta
			if families > 1 {
				metas[i].Help = fmt.Sprintf("Seconds the CPUs spent in each mode, family %d.", i*families/seriesPerBatch)
				if i > 0 && i*families/seriesPerBatch == (i-1)*families/seriesPerBatch {
					metas[i].Help = metas[i-1].Help // the family's own string
				}
			}
		}
		b.Run(fmt.Sprintf("families=%d", families), func(b *testing.B) { benchAppend(b, series, metas) })
	}
}

func benchAppend(b *testing.B, series []labels.Labels, metas []metadata.Metadata) {
	run := func(b *testing.B, app func() storage.AppenderV2) {
		refs := make([]storage.SeriesRef, len(series))
		ts := time.Now().UnixMilli()
		batch := func() {
			a := app()
			for i, ls := range series {
				ref, err := a.Append(refs[i], ls, 0, ts, float64(ts+int64(i)), nil, nil, storage.AOptions{Metadata: metas[i]})
				if err != nil {
					b.Fatal(err)
				}
				refs[i] = ref
			}
			if err := a.Commit(); err != nil {
				b.Fatal(err)
			}
			ts += 15000
		}
		batch() // first sight of every series outside the timing
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			batch()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(series)), "ns/sample")
	}

	b.Run("shoal", func(b *testing.B) {
		s, err := Open(filepath.Join(b.TempDir(), "wal"), Options{Compression: compression.Snappy}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, func() storage.AppenderV2 { return s.AppenderV2(context.Background()) })
	})

	b.Run("prometheus-agent", func(b *testing.B) {
		opts := agent.DefaultOptions()
		opts.WALCompression = compression.Snappy
		opts.EnableMetadataWALRecords = true
		db, err := agent.Open(slog.New(slog.DiscardHandler), nil, nil, b.TempDir(), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		run(b, func() storage.AppenderV2 { return db.AppenderV2(context.Background()) })
	})
}

// BenchmarkAppendNewSeries measures the first batch of a target: every series
// is new and gets a series record.
func BenchmarkAppendNewSeries(b *testing.B) {
	const seriesPerBatch = 1000
	b.ReportAllocs()
	s, err := Open(filepath.Join(b.TempDir(), "wal"), Options{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ts := time.Now().UnixMilli()
	n := 0
	for b.Loop() {
		b.StopTimer()
		series := makeSeries(seriesPerBatch, fmt.Sprintf("batch_%d", n))
		n++
		b.StartTimer()
		a := s.AppenderV2(context.Background())
		for _, ls := range series {
			if _, err := a.Append(0, ls, 0, ts, 1, nil, nil, storage.AOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := a.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel runs one scrape-like appender per goroutine (each
// with its own 1k series) against one WAL, as concurrent scrape loops do.
func BenchmarkAppendParallel(b *testing.B) {
	const seriesPerBatch = 1000
	var worker atomic.Int64
	run := func(b *testing.B, app func() storage.AppenderV2) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			series := makeSeries(seriesPerBatch, fmt.Sprintf("worker_%d", worker.Add(1)))
			refs := make([]storage.SeriesRef, len(series))
			ts := time.Now().UnixMilli()
			for pb.Next() {
				a := app()
				for i, ls := range series {
					ref, err := a.Append(refs[i], ls, 0, ts, float64(i), nil, nil, storage.AOptions{})
					if err != nil {
						b.Error(err)
						return
					}
					refs[i] = ref
				}
				if err := a.Commit(); err != nil {
					b.Error(err)
					return
				}
				ts += 15000
			}
		})
	}
	b.Run("shoal", func(b *testing.B) {
		s, err := Open(filepath.Join(b.TempDir(), "wal"), Options{Compression: compression.Snappy}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, func() storage.AppenderV2 { return s.AppenderV2(context.Background()) })
	})
	b.Run("prometheus-agent", func(b *testing.B) {
		opts := agent.DefaultOptions()
		opts.WALCompression = compression.Snappy
		db, err := agent.Open(slog.New(slog.DiscardHandler), nil, nil, b.TempDir(), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		run(b, func() storage.AppenderV2 { return db.AppenderV2(context.Background()) })
	})
}
