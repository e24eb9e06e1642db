package remotewrite

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"
)

// A 401 pauses the queue under the default policy: one request, then
// nothing until the credentials file changes (probe_interval is an hour
// here), then the backlog is delivered whole. The paused gauge says so
// meanwhile; nothing is dropped.
func TestAuthRefusalPausesUntilCredentialsChange(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer new" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rcv.serve(w, r)
	})
	var unauthorized atomic.Int64
	srv := countingServer(t, auth, &unauthorized)
	refs := tw.fleet(1, 5)
	tss := writeRounds(tw, refs, 1000, 3)
	cfg := loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: q
    authorization: {credentials_file: `+token+`}
    queue_config: {batch_send_deadline: 20ms, min_backoff: 1ms, max_backoff: 1ms, max_shards: 1}
`, srv.URL)
	tm := startManagerWith(t, walDir, progDir, cfg, map[string]QueueOptions{"q": {ProbeInterval: model.Duration(time.Hour)}})
	paused := func() float64 {
		return tm.metric(t, "shoal_remotewrite_queue_paused", "remote_name", "q", "reason", pauseAuth)
	}
	waitFor(t, "queue paused by authentication", func() bool { return paused() == 1 })
	// Many credentials polls later, still the one refused request.
	for range 20 {
		time.Sleep(credentialsPollInterval)
	}
	if n := unauthorized.Load(); n != 1 {
		t.Fatalf("%d requests while paused, want 1 (no retry storm)", n)
	}
	if err := os.WriteFile(token, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backlog delivered after the credentials changed", func() bool { d, _ := rcv.count(); return d == len(refs)*len(tss) })
	waitFor(t, "pause over", func() bool { return paused() == 0 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
	if v := tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q"); v > 0 {
		t.Fatalf("dropped %v samples", v)
	}
}

// A 404 pauses the queue until the probe: one request per probe_interval,
// not one per backoff, and the backlog is delivered once the path exists.
func TestNotFoundPausesUntilProbe(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	var notFound atomic.Int64
	ready := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ready:
			rcv.serve(w, r)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	srv := countingServer(t, h, &notFound)
	refs := tw.fleet(1, 3)
	tss := writeRounds(tw, refs, 1000, 2)
	tm := startManagerWith(t, walDir, progDir, loadConfig(t, oneQueue, srv.URL),
		map[string]QueueOptions{"q": {ProbeInterval: model.Duration(300 * time.Millisecond)}})
	waitFor(t, "queue paused by 404", func() bool {
		return tm.metric(t, "shoal_remotewrite_queue_paused", "remote_name", "q", "reason", pauseNotFound) == 1
	})
	start := time.Now()
	waitFor(t, "a probe", func() bool { return notFound.Load() >= 2 })
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("probed after %v, probe_interval is 300ms", d)
	}
	close(ready)
	waitFor(t, "backlog delivered", func() bool { d, _ := rcv.count(); return d == len(refs)*len(tss) })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
}

// failure_policy: spec is the Remote-Write specification's sender: no 4xx
// but 429 is retried; each refused request is dropped, counted by reason,
// and the queue moves on. 429 and 5xx are still retried.
func TestSpecPolicyDropsClientErrors(t *testing.T) {
	cases := map[int]string{
		401: dropUnauthorized, 403: dropForbidden, 404: dropNotFound, 408: dropRequestTimeout,
		413: dropTooLarge, 405: dropClientError, 400: dropBadRequest,
		429: "", 503: "",
	}
	for status, reason := range cases {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			walDir, progDir := dirs(t)
			tw := newTestWAL(t, walDir)
			rcv := newReceiver(t)
			rcv.respond = func(n int, _ *prompb.WriteRequest, _ http.ResponseWriter) int {
				if n == 0 {
					return status
				}
				return 0
			}
			refs := tw.fleet(1, 10)
			first := writeRounds(tw, refs, 1000, 1)
			tm := startManagerWith(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL),
				map[string]QueueOptions{"q": {FailurePolicy: PolicySpec}})
			if reason == "" {
				waitFor(t, "retried and delivered", func() bool { d, _ := rcv.count(); return d == 10 })
				tm.shutdown(t, 5*time.Second)
				checkAll(t, rcv, refs, first)
				return
			}
			waitFor(t, "dropped", func() bool {
				return tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q", "reason", reason) == 10
			})
			later := writeRounds(tw, refs, 100000, 1)
			tm.Notify()
			waitFor(t, "later samples", func() bool { d, _ := rcv.count(); return d == 10 })
			tm.shutdown(t, 5*time.Second)
			checkAll(t, rcv, refs, later)
			rcv.mtx.Lock()
			n := rcv.requests
			rcv.mtx.Unlock()
			if n != 2 {
				t.Fatalf("%d requests, want 2: the refused one (not retried, not split) and the later one", n)
			}
		})
	}
}

func TestExtractOptions(t *testing.T) {
	plain := []byte("remote_write:\n  - url: http://a/\n")
	out, opts, err := ExtractOptions(plain)
	if err != nil || string(out) != string(plain) || len(opts) != 1 || opts[0] != (QueueOptions{}) {
		t.Fatalf("without a block: %q %v %v, want the same bytes and default options", out, opts, err)
	}
	withBlock := []byte(`global: {scrape_interval: 15s}
remote_write:
  - url: http://a/
    name: a
    shoal:
      failure_policy: spec
  - url: http://b/
    shoal: {probe_interval: 10m}
    queue_config: {max_shards: 2}
`)
	out, opts, err = ExtractOptions(withBlock)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "shoal") || !strings.Contains(string(out), "max_shards") {
		t.Fatalf("blocks not removed, or too much:\n%s", out)
	}
	want := []QueueOptions{{FailurePolicy: PolicySpec}, {ProbeInterval: model.Duration(10 * time.Minute)}}
	if len(opts) != 2 || opts[0] != want[0] || opts[1] != want[1] {
		t.Fatalf("options %+v, want %+v", opts, want)
	}
	cfg := loadConfig(t, string(out))
	byName := OptionsByName(cfg, opts)
	if byName["a"] != want[0] || byName[QueueName(cfg.RemoteWriteConfigs[1])] != want[1] {
		t.Fatalf("options by queue name %+v", byName)
	}
	for _, bad := range []string{
		"remote_write:\n  - url: http://a/\n    shoal: {failure_policy: never}\n",
		"remote_write:\n  - url: http://a/\n    shoal: {retry: forever}\n",
		"remote_write:\n  - url: http://a/\n    shoal: {probe_interval: -1m}\n",
	} {
		if _, _, err := ExtractOptions([]byte(bad)); err == nil || !strings.Contains(err.Error(), "remote_write[0].shoal") {
			t.Errorf("%q: err = %v, want one naming remote_write[0].shoal", bad, err)
		}
	}
}

// countingServer serves h on loopback, counting requests in n.
func countingServer(t *testing.T, h http.Handler, n *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}
