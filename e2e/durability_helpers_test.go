package e2e

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/shoal-dev/shoal/internal/receiver"
)

var errNotYet = errors.New("not yet")

// gatedReceiver is the real TSDB receiver behind a gate the test sets: while
// status is non-zero every write is answered with it; acks is told (without
// blocking) when a write was accepted.
type gatedReceiver struct {
	*testReceiver
	status atomic.Int64
	acks   chan time.Time
	gated  atomic.Int64 // writes answered by the gate
}

func startGatedReceiver(t testing.TB) *gatedReceiver {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := receiver.New(t.TempDir(), logger)
	if err != nil {
		fatal(t, err)
	}
	g := &gatedReceiver{testReceiver: &testReceiver{Receiver: r}, acks: make(chan time.Time, 64)}
	h := r.Handler()
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/api/v1/write" {
			if code := int(g.status.Load()); code != 0 {
				g.gated.Add(1)
				http.Error(w, fmt.Sprintf("gated by the e2e test (%d)", code), code)
				return
			}
			rec := &statusRecorder{ResponseWriter: w}
			h.ServeHTTP(rec, req)
			if rec.code/100 == 2 || rec.code == 0 {
				select {
				case g.acks <- time.Now():
				default:
				}
			}
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		g.srv.Close()
		if err := r.Close(); err != nil {
			errorf(t, "closing receiver: %v", err)
		}
	})
	return g
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// durabilityConfig writes a configuration with Prometheus' default
// queue_config (plus queueYAML lines, indented for queue_config) and returns
// its path.
func durabilityConfig(t testing.TB, targets []string, url string, queueYAML ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  external_labels: {cluster: e2e}\n",
		model.Duration(scrapeInterval), model.Duration(scrapeInterval))
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: e2e\n    static_configs:\n      - targets: [%s]\n", quoteAll(targets))
	fmt.Fprintf(&b, "remote_write:\n  - url: %q\n    name: rcv\n", url)
	if len(queueYAML) > 0 {
		b.WriteString("    queue_config:\n")
		for _, l := range queueYAML {
			fmt.Fprintf(&b, "      %s\n", l)
		}
	}
	path := filepath.Join(t.TempDir(), "shoal.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fatal(t, err)
	}
	return path
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// checkCounters waits until the receiver has every counter value each
// target served up to want, then fails for any value missing other than
// those in allowed (per target: scrapes answered just before a SIGKILL,
// which may never have been appended).
func checkCounters(t *testing.T, recv *testReceiver, targets []*target, want map[string]int, allowed map[string]map[int]bool) {
	t.Helper()
	eventually(t, convergeTimeout, "receiver has every counter value served", func() error {
		vals, err := recv.counterValues()
		if err != nil {
			return err
		}
		for _, tg := range targets {
			if got := maxValue(vals[tg.addr]); got < want[tg.addr] {
				return fmt.Errorf("%s: receiver has counter up to %d, target served %d", tg.addr, got, want[tg.addr])
			}
		}
		return nil
	})
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		missing, err := missingValues(vals[tg.addr], want[tg.addr])
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
		var lost []int
		for _, m := range missing {
			if !allowed[tg.addr][m] {
				lost = append(lost, m)
			}
		}
		if len(lost) > 0 {
			errorf(t, "%s: counter values %v lost (1..%d served; missing %v)", tg.addr, lost, want[tg.addr], missing)
		}
	}
}

// checkRefusalsExplained fails unless every sample the receiver refused is
// explained by a request that was in flight when the agent was killed: the
// agent re-sends such a request alone and logs when the receiver refuses it
// as already present (a Remote-Write 1.0 request is refused on its first bad
// sample, so each counts once at the receiver). Any other refusal means
// acknowledged data was sent again.
func checkRefusalsExplained(t *testing.T, recv *testReceiver, a *agent) {
	t.Helper()
	st := recv.Stats()
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		fatal(t, err)
	}
	explained := uint64(strings.Count(string(b), "Remote write refused a re-sent request"))
	t.Logf("receiver: stored=%d exact_duplicates=%d out_of_order=%d duplicate=%d too_old=%d rolled_back=%d; in-flight requests re-sent and refused as present: %d",
		st.Stored, st.Dropped, st.OutOfOrder, st.Duplicate, st.TooOld, st.RolledBack, explained)
	if st.Rejected() > explained || st.Duplicate+st.TooOld+st.Invalid > 0 {
		errorf(t, "receiver refused %d samples, only %d explained by requests in flight at a kill", st.Rejected(), explained)
	}
}

// servedNow returns every target's current counter value.
func servedNow(targets []*target) map[string]int {
	m := map[string]int{}
	for _, tg := range targets {
		m[tg.addr] = tg.count()
	}
	return m
}

// appendToFile adds text at the end of the file at path.
func appendToFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		fatal(t, err)
	}
	if _, err := f.WriteString(text); err != nil {
		fatal(t, err)
	}
	if err := f.Close(); err != nil {
		fatal(t, err)
	}
}
