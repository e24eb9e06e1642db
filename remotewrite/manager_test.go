package remotewrite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/wal"
)

func (m *Manager) queueFor(name string) *queue {
	m.mtx.Lock()
	defer m.mtx.Unlock()
	return m.queues[name]
}

func (m *Manager) queueNames() []string {
	var names []string
	for _, q := range *m.snapshot.Load() {
		names = append(names, q.name)
	}
	return names
}

func TestReloadKeepsUnchangedQueuesAndResumesChangedOnes(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	ra, rb := newReceiver(t), newReceiver(t)
	refs := tw.fleet(1, 4)
	tss := writeRounds(tw, refs, 1000, 10)
	yml := `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: a
` + fastQueue + `
  - url: URL1
    name: b
` + fastQueue
	tm := startManager(t, walDir, progDir, loadConfig(t, yml, ra.srv.URL, rb.srv.URL))
	waitFor(t, "both delivered", func() bool {
		a, _ := ra.count()
		b, _ := rb.count()
		return a >= 40 && b >= 40
	})
	qa, qb := tm.queueFor("a"), tm.queueFor("b")

	// Same configuration, parsed again: nothing restarts.
	if err := tm.ApplyConfig(loadConfig(t, yml, ra.srv.URL, rb.srv.URL)); err != nil {
		t.Fatal(err)
	}
	if tm.queueFor("a") != qa || tm.queueFor("b") != qb {
		t.Fatal("unchanged queues were restarted")
	}

	// a changes (max_shards), b goes away.
	if err := tm.ApplyConfig(loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: a
`+fastQueue+`      min_shards: 2
`, ra.srv.URL)); err != nil {
		t.Fatal(err)
	}
	if q := tm.queueFor("a"); q == nil || q == qa {
		t.Fatal("changed queue a was not replaced")
	}
	if tm.queueFor("b") != nil {
		t.Fatal("removed queue b still runs")
	}
	select {
	case <-qb.done:
	default:
		t.Fatal("removed queue b was not stopped")
	}
	if v := tm.metric(t, "prometheus_remote_storage_samples_total", "remote_name", "b"); v != -1 {
		t.Fatalf("metrics of removed queue b still exported: %v", v)
	}
	if v := tm.metric(t, "prometheus_remote_storage_shards_min", "remote_name", "a"); v != 2 {
		t.Fatalf("shards_min of a = %v, want 2", v)
	}

	// The new a resumes where the old one stopped: no duplicates.
	more := writeRounds(tw, refs, 100000, 5)
	tm.Notify()
	waitFor(t, "a delivers new data", func() bool { d, _ := ra.count(); return d >= 60 })
	checkAll(t, ra, refs, append(tss, more...))
	if d, _ := rb.count(); d != 40 {
		t.Fatalf("removed queue b received %d samples, want 40", d)
	}

	// No remote_write at all: nothing holds WAL segments back.
	if err := tm.ApplyConfig(loadConfig(t, "global: {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, ok := tm.PendingSegment(); ok {
		t.Fatal("PendingSegment ok with no queues")
	}
	tm.shutdown(t, time.Second)
}

func TestPendingSegmentBeforeConfigKeepsEverything(t *testing.T) {
	walDir, progDir := dirs(t)
	m, err := NewManager(walDir, progDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := m.PendingSegment(); !ok || s != 0 {
		t.Fatalf("unconfigured PendingSegment = %d %v, want 0 true", s, ok)
	}
	m.Notify() // no queues: must not block or panic
	if err := m.ApplyConfig(loadConfig(t, "global: {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.PendingSegment(); ok {
		t.Fatal("PendingSegment ok without remote_write")
	}
	m.Stop(time.Second)
	if err := m.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigChangesNothing(t *testing.T) {
	walDir, progDir := dirs(t)
	newTestWAL(t, walDir)
	rcv := newReceiver(t)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	q := tm.queueFor("q")
	for name, yml := range map[string]string{
		"missing CA file": `
remote_write:
  - url: URL0
    name: other
    tls_config: {ca_file: /nonexistent/ca.pem}
`,
		"duplicate queue": `
remote_write:
  - url: URL0
  - url: URL0
    name: x
  - url: URL0
`,
	} {
		if err := tm.ApplyConfig(loadConfig(t, yml, rcv.srv.URL)); err == nil {
			t.Errorf("%s: ApplyConfig succeeded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if tm.queueFor("q") != q || len(tm.queueNames()) != 1 {
			t.Fatalf("%s: a failed ApplyConfig changed the queues", name)
		}
	}
	tm.shutdown(t, time.Second)
	if err := tm.ApplyConfig(loadConfig(t, oneQueue, rcv.srv.URL)); err == nil {
		t.Fatal("ApplyConfig after Stop succeeded")
	}
}

func TestCorruptProgressFileResendsFromStart(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 3)
	tss := writeRounds(tw, refs, 1000, 4)
	if err := os.MkdirAll(progDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progDir, "q.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 12 })
	tm.shutdown(t, time.Second)
	checkAll(t, rcv, refs, tss)
	if pf := readProgressFile(t, filepath.Join(progDir, "q.json")); pf.Offset != segSize(t, walDir, 0) {
		t.Fatalf("progress not rewritten: %+v", pf)
	}
}

func TestWALAppearsLater(t *testing.T) {
	walDir, progDir := dirs(t)
	rcv := newReceiver(t)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	if s, ok := tm.PendingSegment(); !ok || s != 0 {
		t.Fatalf("PendingSegment before any WAL = %d %v", s, ok)
	}
	tw := newTestWAL(t, walDir)
	refs := tw.fleet(1, 2)
	tss := writeRounds(tw, refs, 1000, 3)
	tm.Notify()
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 6 })
	tm.shutdown(t, time.Second)
	checkAll(t, rcv, refs, tss)
}

func TestContextCancelPersistsAcknowledged(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	// Only the first write and the one at exit happen.
	old := persistInterval
	persistInterval = time.Hour
	t.Cleanup(func() { persistInterval = old })
	refs := tw.fleet(1, 2)
	writeRounds(tw, refs, 1000, 3)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 6 })
	writeRounds(tw, refs, 5000, 3)
	tm.Notify()
	waitFor(t, "second delivery", func() bool { d, _ := rcv.count(); return d >= 12 })
	// The receiver stores a request before the queue reads its answer:
	// wait until the queue has acknowledged the whole segment.
	end := wal.Position{Segment: 0, Offset: segSize(t, walDir, 0)}
	waitFor(t, "second delivery acknowledged", func() bool { return tm.Acked(end) })
	tm.cancel()
	if err := <-tm.done; err != nil {
		t.Fatal(err)
	}
	tm.done <- nil
	if pf := readProgressFile(t, filepath.Join(progDir, "q.json")); pf.Offset != segSize(t, walDir, 0) {
		t.Fatalf("progress after cancel = %+v, want offset %d", pf, segSize(t, walDir, 0))
	}
}

func TestReshard(t *testing.T) {
	q := &queue{s: settings{minShards: 1, maxShards: 5}, logger: testLogger(t), m: unregisteredMetrics().forQueue("x", "u")}
	steps := []struct {
		behind, retried bool
		want            int
	}{
		{true, false, 2}, {true, false, 4}, {true, false, 5}, {true, false, 5},
		{true, true, 5}, // retries never add shards
		{false, false, 2}, {false, false, 1}, {false, false, 1},
	}
	cur := 1
	for i, s := range steps {
		cur = q.reshard(cur, s.behind, s.retried)
		if cur != s.want {
			t.Fatalf("step %d: shards = %d, want %d", i, cur, s.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"Fri, 02 Jan 2026 03:04:15 GMT": 10 * time.Second,
		"Fri, 02 Jan 2026 03:04:00 GMT": 0,
		// A receiver cannot stall the queue for longer than maxRetryAfter.
		"86400":                         maxRetryAfter,
		"99999999999999999999":          maxRetryAfter,
		"-99999999999999999999":         0,
		"Sat, 03 Jan 2026 03:04:05 GMT": maxRetryAfter,
		"300":                           5 * time.Minute,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestQueueNameIsStableAndFileSafe(t *testing.T) {
	cfg := loadConfig(t, `
remote_write:
  - url: http://example.com/api/v1/write
  - url: http://example.com/api/v1/write
    name: ../../etc/passwd
`)
	a, b := QueueName(cfg.RemoteWriteConfigs[0]), QueueName(cfg.RemoteWriteConfigs[0])
	if a != b || len(a) != 8 {
		t.Fatalf("hash names %q %q", a, b)
	}
	if n := QueueName(cfg.RemoteWriteConfigs[1]); filepath.Base(n) != n || n[0] == '.' {
		t.Fatalf("unsafe name %q", n)
	}
}

// The project's rule for metrics: register in the constructor, fail on a
// registration error, unregister on close. A second Manager on a registry
// in use is refused and leaves the first one's metrics alone; Stop keeps
// them readable; after Close the registry is empty and a new Manager can use it.
func TestMetricsUnregisteredOnClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	count := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	first, err := NewManager(t.TempDir(), t.TempDir(), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	before := count()
	if before == 0 {
		t.Fatal("no metric exported after NewManager")
	}
	if _, err := NewManager(t.TempDir(), t.TempDir(), nil, reg); err == nil {
		t.Fatal("a second Manager on the same registry was accepted")
	}
	if got := count(); got != before {
		t.Fatalf("the refused Manager changed the registry: %d metrics, want %d", got, before)
	}
	first.Stop(time.Second)
	if got := count(); got != before {
		t.Fatalf("Stop changed the registry: %d metrics, want %d (final values stay readable)", got, before)
	}
	first.Close()
	if got := count(); got != 0 {
		t.Fatalf("%d metrics left after Close", got)
	}
	again, err := NewManager(t.TempDir(), t.TempDir(), nil, reg)
	if err != nil {
		t.Fatalf("a new Manager after Close: %v", err)
	}
	again.Close()
}
