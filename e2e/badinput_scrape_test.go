package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// badTarget is one hostile or broken scrape target and what shoal must make
// of it. Each gets its own job so that its limit applies to it alone.
type badTarget struct {
	job    string
	limits string // extra scrape_config lines, indented for the job
	serve  http.HandlerFunc
	// down: the scrape fails; lastError (API and status page) contains
	// errText. Otherwise the target stays up and only the offending samples
	// are dropped (Prometheus' behaviour), counted in metric.
	down    bool
	errText string
	metric  string // a prometheus_target_* counter that must count it ("" for none)
}

// serveHandler starts a real HTTP server for h on 127.0.0.1 and returns its
// address.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(t, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func textBody(body func(w io.Writer)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		body(w)
	}
}

func badScrapeTargets() []badTarget {
	return []badTarget{
		{
			job:     "malformed",
			serve:   textBody(func(w io.Writer) { io.WriteString(w, "ok_series 1\nthis is { not the exposition format\n") }),
			down:    true,
			errText: "invalid syntax while parsing",
		},
		{
			job:    "huge_body",
			limits: "    body_size_limit: 10KB\n",
			serve: textBody(func(w io.Writer) {
				for i := range 20000 {
					fmt.Fprintf(w, "huge_series{i=\"%d\"} 1\n", i)
				}
			}),
			down: true, errText: "body size limit exceeded",
			metric: "prometheus_target_scrapes_exceeded_body_size_limit_total",
		},
		{
			job:    "slow_loris",
			limits: "    scrape_timeout: 500ms\n",
			serve: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
				io.WriteString(w, "# HELP slow_series never ends\n")
				for {
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
						io.WriteString(w, "#")
					}
				}
			},
			down: true, errText: "context deadline exceeded",
		},
		{
			// A body streamed as fast as the loopback allows, never ending,
			// with no body_size_limit: Prometheus would buffer it until
			// scrape_timeout (1 GiB in 500ms here); shoal's default limit
			// stops it first.
			job:    "endless",
			limits: "    scrape_timeout: 500ms\n",
			serve: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
				chunk := []byte(strings.Repeat("endless_series 1\n", 4096))
				for r.Context().Err() == nil {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			},
			down: true, errText: "body size limit exceeded",
			metric: "prometheus_target_scrapes_exceeded_body_size_limit_total",
		},
		{
			job:    "sample_limit",
			limits: "    sample_limit: 10\n",
			serve: textBody(func(w io.Writer) {
				for i := range 50 {
					fmt.Fprintf(w, "many_series{i=\"%d\"} 1\n", i)
				}
			}),
			down: true, errText: "sample limit exceeded",
			metric: "prometheus_target_scrapes_exceeded_sample_limit_total",
		},
		{
			job:    "label_limit",
			limits: "    label_limit: 5\n",
			serve: textBody(func(w io.Writer) {
				io.WriteString(w, `wide_series{a="1",b="2",c="3",d="4",e="5",f="6",g="7"} 1`+"\n")
			}),
			down: true, errText: "label_limit exceeded",
			metric: "prometheus_target_scrape_pool_exceeded_label_limits_total",
		},
		{
			job:    "label_name_length",
			limits: "    label_name_length_limit: 10\n",
			serve: textBody(func(w io.Writer) {
				fmt.Fprintf(w, "long_name_series{%s=\"x\"} 1\n", strings.Repeat("n", 40))
			}),
			down: true, errText: "label_name_length_limit exceeded",
			metric: "prometheus_target_scrape_pool_exceeded_label_limits_total",
		},
		{
			job:    "label_value_length",
			limits: "    label_value_length_limit: 10\n",
			serve: textBody(func(w io.Writer) {
				fmt.Fprintf(w, "lvs{v=%q} 1\n", strings.Repeat("v", 100))
			}),
			down: true, errText: "label_value_length_limit exceeded",
			metric: "prometheus_target_scrape_pool_exceeded_label_limits_total",
		},
		{
			// The same series twice with different values: the second is
			// dropped, the scrape and the rest of it kept.
			job: "duplicates",
			serve: textBody(func(w io.Writer) {
				io.WriteString(w, "dup_series 1\ndup_series 2\ndup_ok_series 1\n")
			}),
			metric: "prometheus_target_scrapes_sample_duplicate_timestamp_total",
		},
		{
			// An hour ahead is past the scrape loop's 10 minutes: dropped
			// as out of bounds, the rest of the scrape kept.
			job: "future",
			serve: textBody(func(w io.Writer) {
				fmt.Fprintf(w, "future_series 1 %d\nfuture_ok_series 1\n", time.Now().Add(time.Hour).UnixMilli())
			}),
			metric: "prometheus_target_scrapes_sample_out_of_bounds_total",
		},
	}
}

// TestScrapeBadInput runs one agent with every bad target of
// badScrapeTargets and three good ones. Each bad target shows its reason in
// /api/v1/targets and on the status page, is counted, and its up=0 (or its
// good samples) reaches the receiver; the good targets lose nothing and the
// receiver refuses nothing.
func TestScrapeBadInput(t *testing.T) {
	needBinary(t)
	good := startTargets(t, 3, 5)
	recv := startReceiver(t)
	bad := badScrapeTargets()
	addrs := map[string]string{}

	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n", scrapeInterval, scrapeInterval)
	fmt.Fprintf(&b, "  - job_name: good\n    static_configs:\n      - targets: [%s]\n", strings.Join(targetAddrs(good), ", "))
	for _, bt := range bad {
		addrs[bt.job] = serveHandler(t, bt.serve)
		fmt.Fprintf(&b, "  - job_name: %s\n%s    static_configs:\n      - targets: [%q]\n", bt.job, bt.limits, addrs[bt.job])
	}
	fmt.Fprintf(&b, "remote_write:\n  - url: %q\n    queue_config:\n      batch_send_deadline: %s\n      min_backoff: 50ms\n      max_backoff: 500ms\n",
		recv.writeURL(), batchSendDeadline)
	cfg := filepath.Join(t.TempDir(), "shoal.yml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		fatal(t, err)
	}
	a := newAgent(t, agentSpec{name: "badscrape", config: cfg})
	a.start()
	a.waitReady(startTimeout)

	// Every bad target is scraped and judged; /api/v1/targets says why.
	eventually(t, startTimeout, "every bad target judged", func() error {
		if err := a.exitedEarly(); err != nil {
			fatal(t, err)
		}
		active, err := a.activeTargets()
		if err != nil {
			return err
		}
		for _, bt := range bad {
			at, ok := active[addrs[bt.job]]
			switch {
			case !ok:
				return fmt.Errorf("%s not active", bt.job)
			case at.LastScrape.IsZero():
				return fmt.Errorf("%s not scraped yet", bt.job)
			case bt.down && (at.Health != "down" || !strings.Contains(at.LastError, bt.errText)):
				return fmt.Errorf("%s: health %q, lastError %q; want down with %q", bt.job, at.Health, at.LastError, bt.errText)
			case !bt.down && (at.Health != "up" || at.LastError != ""):
				return fmt.Errorf("%s: health %q, lastError %q; want up", bt.job, at.Health, at.LastError)
			}
		}
		return nil
	})
	active, err := a.activeTargets()
	if err != nil {
		fatal(t, err)
	}
	for _, bt := range bad {
		t.Logf("%-20s health=%s lastError=%q", bt.job, active[addrs[bt.job]].Health, active[addrs[bt.job]].LastError)
	}

	// The status page shows each reason.
	resp, err := httpClient.Get(a.url("/"))
	if err != nil {
		fatal(t, err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bt := range bad {
		if bt.down && !strings.Contains(string(page), bt.errText) {
			errorf(t, "status page lacks %s's error %q", bt.job, bt.errText)
		}
	}

	// Prometheus' counters count them.
	mfs, err := a.metrics()
	if err != nil {
		fatal(t, err)
	}
	for _, bt := range bad {
		if bt.metric == "" {
			continue
		}
		if v, err := testutil.Value(mfs, bt.metric, nil); err != nil || v < 1 {
			errorf(t, "%s: %s = %v (%v), want >= 1", bt.job, bt.metric, v, err)
		} else {
			t.Logf("%-20s %s = %v", bt.job, bt.metric, v)
		}
	}
	if v, err := testutil.Value(mfs, "prometheus_target_scrape_pool_exceeded_label_limits_total", nil); err != nil || v < 3 {
		errorf(t, "exceeded_label_limits_total = %v (%v), want >= 3 (three jobs)", v, err)
	}

	// The good targets lose nothing while the bad ones fail beside them.
	waitServed(t, good, time.Now(), 5, startTimeout)
	checkServedArrived(t, recv, good)

	// At the receiver: up=0 for the failing targets, up=1 and the good part
	// of the scrape for those that only lost samples.
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	upBy := byInstance(ups)
	for _, bt := range bad {
		group := upBy[addrs[bt.job]]
		if len(group) != 1 || len(group[0].samples) == 0 {
			errorf(t, "%s: up series at the receiver: %s", bt.job, seriesLabels(group))
			continue
		}
		want := 1.0
		if bt.down {
			want = 0
		}
		if last := group[0].samples[len(group[0].samples)-1]; last.V != want {
			errorf(t, "%s: up=%v at the receiver, want %v", bt.job, last.V, want)
		}
	}
	for _, name := range []string{"dup_ok_series", "future_ok_series", "dup_series"} {
		if ss, err := recv.seriesOf(name); err != nil || len(ss) != 1 || len(ss[0].samples) == 0 {
			errorf(t, "%s at the receiver: %v %v", name, seriesLabels(ss), err)
		}
	}
	for _, name := range []string{"future_series", "many_series", "wide_series", "huge_series"} {
		if ss, err := recv.seriesOf(name); err != nil || len(ss) != 0 {
			errorf(t, "%s reached the receiver: %v %v", name, seriesLabels(ss), err)
		}
	}
	recv.checkNoRejections(t)
	if rss, err := peakRSS(a.pid()); err == nil {
		t.Logf("peak RSS of the agent: %.1f MiB", float64(rss)/(1<<20))
	}
	if err := a.exitedEarly(); err != nil {
		fatal(t, err)
	}
	a.stop()
}
