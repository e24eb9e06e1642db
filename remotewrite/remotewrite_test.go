package remotewrite

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

func segSize(t *testing.T, walDir string, seg int) int64 {
	t.Helper()
	fi, err := os.Stat(wlog.SegmentName(walDir, seg))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func series(i int) string {
	return fmt.Sprintf(`{__name__="test_metric", cluster="c1", i="%d"}`, i)
}

const oneQueue = `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: q
` + fastQueue

// checkAll asserts that every (series, ts) pair arrived exactly once.
func checkAll(t *testing.T, rcv *receiver, refs []int, tss []int64) {
	t.Helper()
	for _, r := range refs {
		for _, ts := range tss {
			if n := rcv.has(series(r), ts); n != 1 {
				t.Fatalf("series %d ts %d received %d times, want exactly once", r, ts, n)
			}
		}
	}
	d, dups := rcv.count()
	if d != len(refs)*len(tss) || dups != 0 {
		t.Fatalf("receiver has %d distinct samples (%d duplicated), want %d and 0", d, dups, len(refs)*len(tss))
	}
}

func writeRounds(tw *testWAL, refs []int, from int64, n int) []int64 {
	var tss []int64
	for k := range n {
		ts := from + int64(k)*1000
		tw.samples(refs, ts)
		tss = append(tss, ts)
	}
	return tss
}

func TestEverySampleOnceAcrossSegmentsWithExternalLabels(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)

	refs := tw.fleet(1, 20)
	tw.series(100, "__name__", "own", "cluster", "mine")
	var tss []int64
	for seg := range 3 {
		tss = append(tss, writeRounds(tw, append(refs, 100), int64(seg*30+1)*1000, 30)...)
		if seg < 2 {
			tw.nextSegment()
		}
	}
	cfg := loadConfig(t, `
global:
  external_labels: {cluster: c1, replica: r1}
remote_write:
  - url: URL0/api/v1/write
`+fastQueue, rcv.srv.URL)
	tm := startManager(t, walDir, progDir, cfg)

	want := 21 * len(tss)
	waitFor(t, "backlog delivered", func() bool { d, _ := rcv.count(); return d >= want })

	// Live tailing: new data in the current segment, announced by Notify.
	last := tss[len(tss)-1] + 1000
	tw.samples(append(refs, 100), last)
	tm.Notify()
	want += 21
	waitFor(t, "live sample delivered", func() bool { d, _ := rcv.count(); return d >= want })

	if _, dups := rcv.count(); dups != 0 {
		t.Fatalf("%d samples arrived twice", dups)
	}
	if n := rcv.has(`{__name__="test_metric", cluster="c1", i="7", replica="r1"}`, 1000); n != 1 {
		t.Fatalf("external labels missing: got %d", n)
	}
	if n := rcv.has(`{__name__="own", cluster="mine", replica="r1"}`, last); n != 1 {
		t.Fatalf("series label must win over external label: got %d", n)
	}
	name := QueueName(cfg.RemoteWriteConfigs[0])
	url := rcv.srv.URL + "/api/v1/write"
	// The queue counts a request once its answer is back, which may be
	// after the receiver has counted its samples.
	waitFor(t, "samples_total of every sample", func() bool {
		return tm.metric(t, "prometheus_remote_storage_samples_total", "remote_name", name, "url", url) == float64(want)
	})
	waitFor(t, "highest sent timestamp of the last sample", func() bool {
		return tm.metric(t, "prometheus_remote_storage_queue_highest_sent_timestamp_seconds", "remote_name", name) == float64(last)/1000
	})
	if v := tm.metric(t, "prometheus_remote_storage_highest_timestamp_in_seconds"); v != float64(last)/1000 {
		t.Fatalf("highest read = %v, want %v", v, float64(last)/1000)
	}
	waitFor(t, "progress in last segment", func() bool { s, ok := tm.PendingSegment(); return ok && s == 2 })
	if v := tm.metric(t, "shoal_remotewrite_progress_segment", "remote_name", name); v != 2 {
		t.Fatalf("progress segment metric = %v", v)
	}
	tm.shutdown(t, 5*time.Second)
	pf := readProgressFile(t, filepath.Join(progDir, name+".json"))
	if pf.Segment != 2 || pf.Offset != segSize(t, walDir, 2) {
		t.Fatalf("progress = %d/%d, want 2/%d", pf.Segment, pf.Offset, segSize(t, walDir, 2))
	}
}

func TestWriteRelabelDropsSeries(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 6)
	tss := writeRounds(tw, refs, 1000, 10)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue+`
    write_relabel_configs:
      - source_labels: [i]
        regex: "3|4"
        action: drop
`, rcv.srv.URL))
	waitFor(t, "kept series delivered", func() bool { d, _ := rcv.count(); return d >= 4*len(tss) })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, []int{1, 2, 5, 6}, tss)
	if v := tm.metric(t, "prometheus_remote_storage_samples_dropped_total", "remote_name", "q", "reason", reasonDroppedSeries); v != 20 {
		t.Fatalf("samples_dropped_total{reason=dropped_series} = %v, want 20", v)
	}
}

func TestServerErrorsAreRetried(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	rcv.respond = func(n int, _ *prompb.WriteRequest, _ http.ResponseWriter) int {
		if n < 2 {
			return http.StatusInternalServerError
		}
		return 0
	}
	refs := tw.fleet(1, 3)
	tss := writeRounds(tw, refs, 1000, 5)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 15 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
	if v := tm.metric(t, "prometheus_remote_storage_samples_retried_total", "remote_name", "q"); v <= 0 {
		t.Fatalf("samples_retried_total = %v, want > 0", v)
	}
	if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 0 {
		t.Fatalf("samples_failed_total = %v, want 0", v)
	}
}

func TestTooManyRequestsHonoursRetryAfter(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	rcv.respond = func(n int, _ *prompb.WriteRequest, w http.ResponseWriter) int {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			return http.StatusTooManyRequests
		}
		return 0
	}
	refs := tw.fleet(1, 2)
	tss := writeRounds(tw, refs, 1000, 3)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue+`      retry_on_http_429: false # ignored: shoal always retries 429
`, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 6 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
	if v := tm.metric(t, "prometheus_remote_storage_samples_retried_total", "remote_name", "q"); v != 6 {
		t.Fatalf("samples_retried_total = %v, want 6", v)
	}
	rcv.mtx.Lock()
	gap := rcv.attempts[1].Sub(rcv.attempts[0])
	rcv.mtx.Unlock()
	// max_backoff is 40ms: only Retry-After explains a wait of about a second.
	if gap < 900*time.Millisecond {
		t.Fatalf("retried after %v, Retry-After asked for 1s", gap)
	}
}

func TestClientErrorDropsBatchAndMovesOn(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	rcv.respond = func(n int, _ *prompb.WriteRequest, _ http.ResponseWriter) int {
		if n == 0 {
			return http.StatusBadRequest
		}
		return 0
	}
	refs := tw.fleet(1, 1)
	writeRounds(tw, refs, 1000, 10) // one request of 10 samples: refused
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))

	waitFor(t, "batch counted as failed", func() bool {
		return tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q") == 10
	})
	// The dropped batch is acknowledged: progress moves past it.
	size := segSize(t, walDir, 0)
	path := filepath.Join(progDir, "q.json")
	waitFor(t, "progress past the dropped batch", func() bool {
		pf, ok, _ := readProgress(path)
		return ok && pf.position() == position{Segment: 0, Offset: size}
	})

	later := writeRounds(tw, refs, 100000, 5)
	tm.Notify()
	waitFor(t, "later samples", func() bool { d, _ := rcv.count(); return d >= 5 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, later)
}

func TestAuthAndHeaders(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	basic, bearer := newReceiver(t), newReceiver(t)
	refs := tw.fleet(1, 2)
	tss := writeRounds(tw, refs, 1000, 3)
	tm := startManager(t, walDir, progDir, loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: basic
    basic_auth: {username: user, password: secret}
    headers: {X-Scope-OrgID: tenant-1}
`+fastQueue+`
  - url: URL1
    name: bearer
    authorization: {credentials: token-123}
`+fastQueue, basic.srv.URL, bearer.srv.URL))
	waitFor(t, "both delivered", func() bool {
		a, _ := basic.count()
		b, _ := bearer.count()
		return a >= 6 && b >= 6
	})
	tm.shutdown(t, 5*time.Second)
	checkAll(t, basic, refs, tss)
	checkAll(t, bearer, refs, tss)

	h := basic.headers[0]
	if u, p, ok := (&http.Request{Header: h}).BasicAuth(); !ok || u != "user" || p != "secret" {
		t.Fatalf("basic auth = %q %q %v", u, p, ok)
	}
	if got := h.Get("X-Scope-OrgID"); got != "tenant-1" {
		t.Fatalf("custom header = %q", got)
	}
	if got := h.Get("Content-Encoding"); got != "snappy" {
		t.Fatalf("Content-Encoding = %q", got)
	}
	if got := h.Get("X-Prometheus-Remote-Write-Version"); got != "0.1.0" {
		t.Fatalf("remote write version = %q", got)
	}
	if got := bearer.headers[0].Get("Authorization"); got != "Bearer token-123" {
		t.Fatalf("bearer header = %q", got)
	}
	for _, n := range []string{"basic", "bearer"} {
		if _, err := os.Stat(filepath.Join(progDir, n+".json")); err != nil {
			t.Fatalf("progress file of %s: %v", n, err)
		}
	}
}

// TestResumeAfterRestart is the key promise: data written while shoal's
// sender was down, in the middle of a segment, in a new segment after the
// WAL was reopened (samples referring to series of an older segment), all
// arrive, once.
func TestResumeAfterRestart(t *testing.T) {
	walDir, progDir := dirs(t)
	rcv := newReceiver(t)
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	tw := newTestWAL(t, walDir)
	refs := tw.fleet(1, 10)
	tss := writeRounds(tw, refs, 1000, 20)

	m1 := startManager(t, walDir, progDir, cfg)
	waitFor(t, "first part", func() bool { d, _ := rcv.count(); return d >= 200 })
	m1.shutdown(t, 5*time.Second)
	pf := readProgressFile(t, filepath.Join(progDir, "q.json"))
	if pf.Segment != 0 || pf.Offset != segSize(t, walDir, 0) {
		t.Fatalf("progress after stop = %d/%d, want 0/%d", pf.Segment, pf.Offset, segSize(t, walDir, 0))
	}

	// More data in the same segment while nothing sends, then the agent
	// restarts: the WAL reopens into a new segment without series records.
	tss = append(tss, writeRounds(tw, refs, 21000, 10)...)
	tw.close()
	tw = newTestWAL(t, walDir)
	tss = append(tss, writeRounds(tw, refs, 31000, 10)...)

	m2 := startManager(t, walDir, progDir, cfg)
	waitFor(t, "second part", func() bool { d, _ := rcv.count(); return d >= 400 })
	m2.shutdown(t, 5*time.Second)
	if pf := readProgressFile(t, filepath.Join(progDir, "q.json")); pf.Segment != 1 {
		t.Fatalf("progress after second stop in segment %d, want 1", pf.Segment)
	}

	// Third run starts in segment 1: series come only from segment 0.
	tss = append(tss, writeRounds(tw, refs, 41000, 10)...)
	m3 := startManager(t, walDir, progDir, cfg)
	waitFor(t, "third part", func() bool { d, _ := rcv.count(); return d >= 500 })
	m3.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
}

func TestReceiverDownThenUp(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	var down atomic.Bool
	down.Store(true)
	rcv.respond = func(int, *prompb.WriteRequest, http.ResponseWriter) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	refs := tw.fleet(1, 10)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	var tss []int64
	for seg := range 3 {
		tss = append(tss, writeRounds(tw, refs, int64(seg*20+1)*1000, 20)...)
		tm.Notify()
		if seg < 2 {
			tw.nextSegment()
		}
	}
	waitFor(t, "retries while down", func() bool {
		rcv.mtx.Lock()
		defer rcv.mtx.Unlock()
		return rcv.requests >= 5
	})
	if s, ok := tm.PendingSegment(); !ok || s != 0 {
		t.Fatalf("PendingSegment while down = %d %v, want 0 true", s, ok)
	}
	down.Store(false)
	waitFor(t, "backlog delivered", func() bool { d, _ := rcv.count(); return d >= 600 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
}

func TestHungReceiverDoesNotBlockStop(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	hang := make(chan struct{})
	rcv := newReceiver(t)
	rcv.respond = func(int, *prompb.WriteRequest, http.ResponseWriter) int {
		<-hang
		return http.StatusServiceUnavailable
	}
	defer close(hang)
	refs := tw.fleet(1, 2)
	tss := writeRounds(tw, refs, 1000, 5)
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	tm := startManager(t, walDir, progDir, cfg)
	waitFor(t, "request in flight", func() bool {
		rcv.mtx.Lock()
		defer rcv.mtx.Unlock()
		return rcv.requests >= 1
	})
	stopped := make(chan struct{})
	go func() { tm.Stop(200 * time.Millisecond); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop blocked on a hung receiver")
	}
	// Nothing was acknowledged, so the next run sends everything.
	if pos, ok, _ := readProgress(filepath.Join(progDir, "q.json")); ok && pos.Offset > 0 {
		t.Fatalf("progress moved to %v without an acknowledgement", pos)
	}
	good := newReceiver(t)
	tm2 := startManager(t, walDir, progDir, loadConfig(t, oneQueue, good.srv.URL))
	waitFor(t, "delivery after restart", func() bool { d, _ := good.count(); return d >= 10 })
	tm2.shutdown(t, 5*time.Second)
	checkAll(t, good, refs, tss)
}

func TestSavedSegmentDeletedStartsAtFirstSegment(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 5)
	var kept []int64
	for seg := range 4 {
		tss := writeRounds(tw, refs, int64(seg*10+1)*1000, 10)
		if seg >= 2 {
			kept = append(kept, tss...)
		}
		tw.nextSegment() // segment 4 is the open one
	}
	// The WAL checkpoints segments 0-1 (series only) and deletes them, as it
	// does for data older than its max age.
	if _, err := wlog.Checkpoint(slog.New(slog.DiscardHandler), tw.w, 0, 1,
		func(chunks.HeadSeriesRef) bool { return true }, math.MaxInt64, false, false); err != nil {
		t.Fatal(err)
	}
	if err := tw.w.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if err := writeProgress(filepath.Join(progDir, "q.json"), progressFile{Version: progressVersion, Queue: "q", Segment: 0, Offset: 100}); err != nil {
		t.Fatal(err)
	}
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "surviving segments delivered", func() bool { d, _ := rcv.count(); return d >= 100 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, kept)
	if v := tm.metric(t, "shoal_remotewrite_segments_skipped_total", "remote_name", "q"); v != 2 {
		t.Fatalf("segments_skipped_total = %v, want 2", v)
	}
}

func TestHistogramsDelivered(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	tw.series(1, "__name__", "h_int")
	tw.series(2, "__name__", "h_float")
	for i := range 5 {
		ts := int64(i+1) * 1000
		rec, _ := tw.enc.HistogramSamples([]record.RefHistogramSample{{Ref: 1, T: ts, H: testHistogram(i)}}, nil)
		tw.log(rec)
		frec, _ := tw.enc.FloatHistogramSamples([]record.RefFloatHistogramSample{{Ref: 2, T: ts, FH: testHistogram(i).ToFloat(nil)}}, nil)
		tw.log(frec)
	}
	tw.log(tw.enc.Metadata([]record.RefMetadata{{Ref: 1, Type: record.GetMetricType("histogram"), Help: "an int histogram", Unit: "seconds"}}, nil))
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue+`    send_native_histograms: true
`, rcv.srv.URL))
	waitFor(t, "histograms", func() bool {
		rcv.mtx.Lock()
		defer rcv.mtx.Unlock()
		return len(rcv.histograms[`{__name__="h_int", cluster="c1"}`]) == 5 &&
			len(rcv.histograms[`{__name__="h_float", cluster="c1"}`]) == 5 &&
			len(rcv.metadata) == 1
	})
	tm.shutdown(t, 5*time.Second)
	if v := tm.metric(t, "prometheus_remote_storage_histograms_total", "remote_name", "q"); v != 10 {
		t.Fatalf("histograms_total = %v, want 10", v)
	}
	if md := rcv.metadata["h_int"]; md.Type != prompb.MetricMetadata_HISTOGRAM || md.Help != "an int histogram" {
		t.Fatalf("metadata = %+v", md)
	}
}

func TestHistogramValuesSurvive(t *testing.T) {
	h := testHistogram(3)
	b := newShardBuffers()
	cnt := b.build([]item{{ref: 1, kind: kindHistogram, t: 5, x: &itemExtra{h: h}}}, nil)
	if cnt.histograms != 1 {
		t.Fatalf("counts = %+v", cnt)
	}
	raw, err := b.encode()
	if err != nil {
		t.Fatal(err)
	}
	req := decodeV1(t, raw)
	got := req.Timeseries[0].Histograms[0].ToIntHistogram()
	if !got.Equals(h) {
		t.Fatalf("histogram changed on the way: %v != %v", got, h)
	}
}

// The send buffers are reused from request to request: a later, smaller
// request must carry exactly its own series and samples, nothing left over.
func TestReusedBuffersCarryNothingOver(t *testing.T) {
	b := newShardBuffers()
	a := labels.FromStrings("__name__", "a", "job", "j", "instance", "long-instance-name:9100")
	c := labels.FromStrings("__name__", "c")
	decode := func(cnt counts) prompb.WriteRequest {
		t.Helper()
		raw, err := b.encode()
		if err != nil {
			t.Fatal(err)
		}
		plain, err := snappy.Decode(nil, raw)
		if err != nil {
			t.Fatal(err)
		}
		var req prompb.WriteRequest
		if err := req.Unmarshal(plain); err != nil {
			t.Fatal(err)
		}
		return req
	}

	cnt := b.build([]item{
		{ref: 1, lbls: a, kind: kindSample, t: 1, v: 1},
		{ref: 2, lbls: c, kind: kindSample, t: 1, v: 10},
		{ref: 1, lbls: a, kind: kindSample, t: 2, v: 2},
	}, nil)
	first := decode(cnt)
	if cnt.samples != 3 || len(first.Timeseries) != 2 || len(first.Timeseries[0].Samples) != 2 {
		t.Fatalf("first request: counts %+v, %+v", cnt, first.Timeseries)
	}

	cnt = b.build([]item{{ref: 2, lbls: c, kind: kindSample, t: 3, v: 30}}, nil)
	second := decode(cnt)
	if cnt.samples != 1 || len(second.Timeseries) != 1 {
		t.Fatalf("second request: counts %+v, %d series", cnt, len(second.Timeseries))
	}
	ts := second.Timeseries[0]
	if got := labelsFromProto(ts.Labels); !labels.Equal(got, c) {
		t.Errorf("labels %v, want %v", got, c)
	}
	if len(ts.Samples) != 1 || ts.Samples[0].Timestamp != 3 || ts.Samples[0].Value != 30 || len(ts.Histograms)+len(ts.Exemplars) != 0 {
		t.Errorf("samples %+v histograms %d exemplars %d, want exactly {30 @3}", ts.Samples, len(ts.Histograms), len(ts.Exemplars))
	}
}

func labelsFromProto(ls []prompb.Label) labels.Labels {
	b := labels.NewScratchBuilder(len(ls))
	for _, l := range ls {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}

func TestCheckpointForgetsDeadSeries(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 10)
	writeRounds(tw, refs, 1000, 2)
	tw.nextSegment()
	live := refs[:5]
	writeRounds(tw, live, 3000, 2)
	tw.nextSegment()
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 30 })
	if v := tm.metric(t, "shoal_remotewrite_series_cached", "remote_name", "q"); v != 10 {
		t.Fatalf("series cached = %v, want 10", v)
	}
	// The WAL checkpoints segments 0-1 keeping only the live series.
	if _, err := wlog.Checkpoint(slog.New(slog.DiscardHandler), tw.w, 0, 1,
		func(r chunks.HeadSeriesRef) bool { return r <= 5 }, math.MaxInt64, false, false); err != nil {
		t.Fatal(err)
	}
	if err := tw.w.Truncate(2); err != nil {
		t.Fatal(err)
	}
	writeRounds(tw, live, 5000, 1)
	tw.nextSegment()
	writeRounds(tw, live, 6000, 1)
	tm.Notify()
	waitFor(t, "dead series forgotten", func() bool {
		return tm.metric(t, "shoal_remotewrite_series_cached", "remote_name", "q") == 5
	})
	waitFor(t, "live series still delivered", func() bool { d, _ := rcv.count(); return d >= 40 })
	tm.shutdown(t, 5*time.Second)
	if n := rcv.has(series(3), 6000); n != 1 {
		t.Fatalf("live series after GC received %d times", n)
	}
}
