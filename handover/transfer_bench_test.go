package handover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/wal"
)

// benchSizes are the backlogs the benchmarks hand over; a sub-benchmark per
// size, so that one can run alone (-bench 'HandOver/64MiB').
var benchSizes = []struct {
	name  string
	bytes int64
}{
	{"16MiB", 16 << 20},
	{"64MiB", 64 << 20},
	{"256MiB", 256 << 20},
	{"1GiB", 1 << 30},
	{"2GiB", 2 << 30},
}

// BenchmarkHandOver times what a stopping replica does once its queues
// have given up (cmd/shoal's handOver): the WAL truncation pass, then
// Leave, which counts the backlog's samples, streams its WAL and progress
// file to a receiving Service over loopback HTTP, and waits for the
// receiver to have fsynced, renamed and announced it. The backlog is a real
// WAL written by the wal package (default segment size and snappy
// compression) of scrape-like commits, with a queue that has sent nothing
// (the remote end down from the start), read from disk rather than from
// the page cache where the platform allows. One op is one hand-over; run
// each size once per count:
//
//	go test -run '^$' -bench 'HandOver/' -benchtime 1x -count 3 ./handover/
func BenchmarkHandOver(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) { benchHandOver(b, sz.bytes) })
	}
}

func benchHandOver(b *testing.B, size int64) {
	base := b.TempDir()
	b.SetBytes(size)
	var truncate, count time.Duration
	var samples int64
	for i := range b.N {
		b.StopTimer()
		dir := filepath.Join(base, fmt.Sprint(i))
		bl := writeBenchBacklog(b, filepath.Join(dir, "leaver"), size)
		samples = bl.samples
		evictFromPageCache(b, bl.root)
		leaver, rcv := benchPair(b, dir)

		b.StartTimer()
		start := time.Now()
		end, err := bl.wal.EndPosition()
		if err != nil {
			b.Fatal(err)
		}
		if err := bl.wal.Truncate(); err != nil {
			b.Fatal(err)
		}
		truncate += time.Since(start)
		leaver.Leave(context.Background(), &Own{
			Dir: bl.root, Node: "leaver", Start: time.UnixMilli(1000), Seq: 2, Queues: []string{"rcv"}, End: end,
		})
		b.StopTimer()

		if got := testutil.ToFloat64(leaver.metrics.transfers.WithLabelValues("sent")); got != 1 {
			b.Fatalf("transfers sent = %v, want 1 (last transfer: %+v)", got, leaver.Status().Last)
		}
		pend, err := rcv.store.Pending()
		if err != nil || len(pend) != 1 || pend[0].End != end || pend[0].Bytes < size {
			b.Fatalf("receiver holds %+v (%v), want one backlog of at least %d bytes up to %v", pend, err, size, end)
		}
		// Counting the samples is the CPU-bound part of Leave (it gives up
		// after a tenth of --cluster.handover.timeout): timed apart here, on
		// the received copy.
		cs := time.Now()
		n, err := countSamples(context.Background(), pend[0].Dir)
		if err != nil || n != samples {
			b.Fatalf("received backlog holds %d samples (%v), want %d", n, err, samples)
		}
		count += time.Since(cs)
		if err := bl.wal.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(truncate.Seconds()/float64(b.N), "truncate-s/op")
	b.ReportMetric(count.Seconds()/float64(b.N), "count-s/op")
	b.ReportMetric(float64(samples), "samples")
}

// BenchmarkLeaveTruncate times the truncation pass that precedes a
// hand-over when the queue has passed every segment but the live one: the
// checkpoint of what was sent (SetBytes counts those segments). With the
// remote end down the pass has nothing to do (BenchmarkHandOver's
// truncate-s/op); a periodic pass runs every minute anyway, so at leave it
// checkpoints at most about a minute's worth of sent WAL. Sizes below one
// segment (128MiB) have nothing to checkpoint and are skipped.
func BenchmarkLeaveTruncate(b *testing.B) {
	for _, sz := range benchSizes {
		if sz.bytes <= wal.DefaultSegmentSize {
			continue
		}
		b.Run(sz.name, func(b *testing.B) {
			base := b.TempDir()
			for i := range b.N {
				b.StopTimer()
				dir := filepath.Join(base, fmt.Sprint(i))
				bl := writeBenchBacklog(b, dir, sz.bytes)
				evictFromPageCache(b, bl.root)
				end, err := bl.wal.EndPosition()
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(segmentBytes(b, filepath.Join(dir, "wal"), end.Segment))
				bl.pending.Store(int64(end.Segment))
				b.StartTimer()
				if err := bl.wal.Truncate(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := os.Stat(wlog.SegmentName(filepath.Join(dir, "wal"), end.Segment-1)); !os.IsNotExist(err) {
					b.Fatalf("segment %d not truncated (%v)", end.Segment-1, err)
				}
				if err := bl.wal.Close(); err != nil {
					b.Fatal(err)
				}
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchPair is a leaver whose only peer is rcv, served on loopback; the
// receiver's announcement reaches the leaver as soon as it answers (gossip
// would take a round more).
func benchPair(b *testing.B, dir string) (leaver, rcv *Service) {
	rcvCl := newFakeCluster("peer")
	rcv = newTestService(b, rcvCl, benchOptions(filepath.Join(dir, "receiver", "handover")))
	leaverCl := newFakeCluster("leaver")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.ServeHTTP(w, r)
		p := rcvCl.Self()
		p.Self, p.HTTPAddr = false, r.Host
		leaverCl.setPeers(p)
	}))
	b.Cleanup(srv.Close)
	leaverCl.setPeers(cluster.Peer{Name: "peer", State: cluster.Participant, HTTPAddr: strings.TrimPrefix(srv.URL, "http://")})
	leaver = newTestService(b, leaverCl, benchOptions(filepath.Join(dir, "leaver", "handover")))
	return leaver, rcv
}

// benchOptions bound nothing the benchmark sizes reach: it measures how
// long a hand-over takes, not whether it fits.
func benchOptions(dir string) Options {
	return Options{Dir: dir, Timeout: 30 * time.Minute, MaxBytes: 8 << 30}
}

// benchBacklog is a leaving node's storage: an open WAL and a progress file.
type benchBacklog struct {
	root    string
	wal     *wal.Storage
	pending atomic.Int64 // the segment the queue still needs
	samples int64
}

const (
	benchTargets         = 100
	benchSeriesPerTarget = 500
	benchInterval        = 15 * time.Second
)

var benchMetrics = []string{
	"node_cpu_seconds_total", "node_network_receive_bytes_total", "node_network_transmit_bytes_total",
	"node_filesystem_avail_bytes", "node_memory_MemAvailable_bytes", "http_requests_total",
	"http_request_duration_seconds_bucket", "process_resident_memory_bytes", "go_gc_duration_seconds",
	"go_goroutines",
}

// writeBenchBacklog appends scrape-like commits (benchTargets targets of
// benchSeriesPerTarget series, one commit per target and scrape, counters
// and gauges) through the wal package until the WAL and progress file hold
// at least size bytes. The queue's progress file says nothing was sent.
func writeBenchBacklog(b *testing.B, root string, size int64) *benchBacklog {
	b.Helper()
	bl := &benchBacklog{root: root}
	progress := filepath.Join(root, "remotewrite")
	if err := os.MkdirAll(progress, 0o755); err != nil {
		b.Fatal(err)
	}
	pf := `{"version":1,"queue":"rcv","url":"","segment":0,"offset":0,"updated_at":"2026-01-01T00:00:00Z","wal_repairs":0}`
	if err := os.WriteFile(filepath.Join(progress, "rcv.json"), []byte(pf), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := wal.Open(filepath.Join(root, "wal"), wal.Options{
		PendingSegment: func() (int, bool) { return int(bl.pending.Load()), true },
	}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	bl.wal = st

	n := benchTargets * benchSeriesPerTarget
	series := make([]labels.Labels, n)
	for i := range series {
		tg, j := i/benchSeriesPerTarget, i%benchSeriesPerTarget
		series[i] = labels.FromStrings(
			"__name__", benchMetrics[j%len(benchMetrics)],
			"instance", fmt.Sprintf("10.0.%d.%d:9100", tg/200, tg%200),
			"job", "node",
			"series", fmt.Sprint(j/len(benchMetrics)),
		)
	}
	refs := make([]storage.SeriesRef, n)
	vals := make([]float64, n)
	rng := rand.New(rand.NewPCG(1, 2))
	// Within the WAL's default max age, so that nothing is refused or aged out.
	t0 := time.Now().Add(-20 * time.Hour).UnixMilli()
	for round := int64(0); ; round++ {
		for tg := range benchTargets {
			app := st.AppenderV2(context.Background())
			ts := t0 + round*benchInterval.Milliseconds() + int64(tg)*37
			for j := range benchSeriesPerTarget {
				i := tg*benchSeriesPerTarget + j
				if j%2 == 0 {
					vals[i] += float64(rng.IntN(5000)) // a counter
				} else {
					vals[i] = rng.Float64() * 1e6 // a gauge
				}
				if refs[i], err = app.Append(refs[i], series[i], 0, ts, vals[i], nil, nil, storage.AOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
			bl.samples += benchSeriesPerTarget
			if tg%16 == 15 && backlogBytes(b, root) >= size {
				return bl
			}
		}
	}
}

func backlogBytes(b *testing.B, root string) int64 {
	files, err := listBacklog(root)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, f := range files {
		n += f.size
	}
	return n
}

// segmentBytes is the size of the segments before segment to in dir.
func segmentBytes(b *testing.B, dir string, to int) int64 {
	var n int64
	for i := range to {
		fi, err := os.Stat(wlog.SegmentName(dir, i))
		if err != nil {
			b.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
