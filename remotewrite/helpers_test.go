package remotewrite

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
)

func TestMain(m *testing.M) {
	// Tests call Notify; polling is only a fallback, keep it brisk anyway.
	pollInterval = 50 * time.Millisecond
	// A paused queue probes soon in tests that do not set probe_interval.
	defaultProbeInterval = 100 * time.Millisecond
	credentialsPollInterval = 10 * time.Millisecond
	os.Exit(m.Run())
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testWAL writes a real tsdb/wlog WAL with tsdb/record records.
type testWAL struct {
	t   testing.TB
	dir string
	w   *wlog.WL
	enc record.Encoder
}

func newTestWAL(t testing.TB, dir string) *testWAL {
	t.Helper()
	w, err := wlog.NewSize(slog.New(slog.DiscardHandler), nil, dir, 4*32*1024, compression.None)
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWAL{t: t, dir: dir, w: w}
	t.Cleanup(func() { tw.close() })
	return tw
}

func (tw *testWAL) close() {
	if tw.w != nil {
		tw.w.Close()
		tw.w = nil
	}
}

func (tw *testWAL) log(rec []byte) {
	tw.t.Helper()
	if err := tw.w.Log(rec); err != nil {
		tw.t.Fatal(err)
	}
}

func (tw *testWAL) series(ref int, lset ...string) {
	tw.log(tw.enc.Series([]record.RefSeries{{Ref: chunks.HeadSeriesRef(ref), Labels: labels.FromStrings(lset...)}}, nil))
}

// samples writes one sample at ts for every ref in refs, value = ts.
func (tw *testWAL) samples(refs []int, ts int64) {
	s := make([]record.RefSample, 0, len(refs))
	for _, r := range refs {
		s = append(s, record.RefSample{Ref: chunks.HeadSeriesRef(r), T: ts, V: float64(ts)})
	}
	tw.log(tw.enc.Samples(s, nil))
}

func (tw *testWAL) nextSegment() int {
	tw.t.Helper()
	n, err := tw.w.NextSegmentSync()
	if err != nil {
		tw.t.Fatal(err)
	}
	return n
}

// fleet declares n series named test_metric{i="<k>"} with refs base..base+n-1.
func (tw *testWAL) fleet(base, n int) []int {
	refs := make([]int, n)
	for k := range n {
		refs[k] = base + k
		tw.series(base+k, "__name__", "test_metric", "i", fmt.Sprint(base+k))
	}
	return refs
}

// receiver is a remote-write endpoint that decodes snappy+protobuf and
// records every sample it accepted.
type receiver struct {
	t   testing.TB
	srv *httptest.Server

	mtx        sync.Mutex
	samples    map[string]map[int64]int // series -> timestamp -> times received
	histograms map[string]map[int64]int
	exemplars  int
	metadata   map[string]prompb.MetricMetadata
	requests   int
	headers    []http.Header
	attempts   []time.Time
	// respond decides the answer to request n (0-based); nil or 0 means 204.
	respond func(n int, req *prompb.WriteRequest, w http.ResponseWriter) int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{
		t:          t,
		samples:    map[string]map[int64]int{},
		histograms: map[string]map[int64]int{},
		metadata:   map[string]prompb.MetricMetadata{},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, hr *http.Request) {
	req, err := remote.DecodeWriteRequest(hr.Body)
	if err != nil {
		r.t.Errorf("receiver: bad request: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mtx.Lock()
	n := r.requests
	r.requests++
	r.headers = append(r.headers, hr.Header.Clone())
	r.attempts = append(r.attempts, time.Now())
	respond := r.respond
	r.mtx.Unlock()
	if respond != nil {
		if code := respond(n, req, w); code != 0 && code/100 != 2 {
			w.WriteHeader(code)
			fmt.Fprintf(w, "refused by test receiver (%d)\nsecond line", code)
			return
		}
	}
	r.mtx.Lock()
	defer r.mtx.Unlock()
	for _, ts := range req.Timeseries {
		b := labels.NewScratchBuilder(len(ts.Labels))
		key := ts.ToLabels(&b, nil).String()
		for _, s := range ts.Samples {
			if r.samples[key] == nil {
				r.samples[key] = map[int64]int{}
			}
			r.samples[key][s.Timestamp]++
		}
		for _, h := range ts.Histograms {
			if r.histograms[key] == nil {
				r.histograms[key] = map[int64]int{}
			}
			r.histograms[key][h.Timestamp]++
		}
		r.exemplars += len(ts.Exemplars)
	}
	for _, md := range req.Metadata {
		r.metadata[md.MetricFamilyName] = md
	}
	w.WriteHeader(http.StatusNoContent)
}

// count returns how many distinct samples arrived and how many arrived more than once.
func (r *receiver) count() (distinct, dups int) {
	r.mtx.Lock()
	defer r.mtx.Unlock()
	for _, m := range r.samples {
		for _, c := range m {
			distinct++
			if c > 1 {
				dups++
			}
		}
	}
	return distinct, dups
}

func (r *receiver) has(series string, ts int64) int {
	r.mtx.Lock()
	defer r.mtx.Unlock()
	return r.samples[series][ts]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadConfig parses a Prometheus configuration with URL placeholders.
func loadConfig(t testing.TB, yml string, urls ...string) *config.Config {
	t.Helper()
	for i, u := range urls {
		yml = strings.ReplaceAll(yml, fmt.Sprintf("URL%d", i), u)
	}
	cfg, err := config.Load(yml, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	return cfg
}

// fastQueue is a queue_config block that keeps tests quick.
const fastQueue = `
    queue_config:
      batch_send_deadline: 20ms
      min_backoff: 5ms
      max_backoff: 40ms
      max_samples_per_send: 50
      capacity: 100
      max_shards: 4
`

type testManager struct {
	*Manager
	reg    *prometheus.Registry
	cancel func()
	done   chan error
}

func startManager(t *testing.T, walDir, progDir string, cfg *config.Config) *testManager {
	t.Helper()
	return startManagerWith(t, walDir, progDir, cfg, nil)
}

// startManagerWith is startManager with shoal's options of the queues.
func startManagerWith(t *testing.T, walDir, progDir string, cfg *config.Config, opts map[string]QueueOptions) *testManager {
	t.Helper()
	return startManagerOn(t, walDir, progDir, cfg, opts, nil)
}

// startManagerOn is startManagerWith whose queues ask local, the WAL open
// in the test (nil: none, as for a hand-over's backlog).
func startManagerOn(t *testing.T, walDir, progDir string, cfg *config.Config, opts map[string]QueueOptions, local LocalWAL) *testManager {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewManager(walDir, progDir, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if local != nil {
		m.AttachWAL(local)
	}
	if err := m.ApplyConfigWithOptions(cfg, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testManager{Manager: m, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { tm.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-tm.done
	})
	return tm
}

// shutdown stops the manager with a flush and waits for Run to return.
func (tm *testManager) shutdown(t *testing.T, flush time.Duration) {
	t.Helper()
	tm.Stop(flush)
	select {
	case err := <-tm.done:
		if err != nil {
			t.Fatal(err)
		}
		tm.done <- nil // for Cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
}

// metric returns the value of a counter or gauge with the given label values
// (name=value pairs), or -1 when absent.
func (tm *testManager) metric(t *testing.T, name string, lv ...string) float64 {
	t.Helper()
	mfs, err := tm.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(lv); i += 2 {
				if !hasLabel(m, lv[i], lv[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func readProgressFile(t *testing.T, path string) progressFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pf progressFile
	if err := json.Unmarshal(b, &pf); err != nil {
		t.Fatal(err)
	}
	return pf
}

func testHistogram(i int) *histogram.Histogram {
	return &histogram.Histogram{
		Count:           uint64(10 + i),
		ZeroCount:       2,
		ZeroThreshold:   0.001,
		Sum:             18.4 * float64(i+1),
		Schema:          1,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}, {Offset: 1, Length: 2}},
		PositiveBuckets: []int64{int64(i + 1), 1, -1, 0},
	}
}

func dirs(t *testing.T) (walDir, progDir string) {
	base := t.TempDir()
	return filepath.Join(base, "wal"), filepath.Join(base, "remotewrite")
}

// unregisteredMetrics is the package's collectors without a registry.
func unregisteredMetrics() *metrics {
	m, _ := newMetrics(nil) // a nil registry cannot fail
	return m
}
