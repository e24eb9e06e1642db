package e2e

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/shoal-dev/shoal/internal/receiver"
)

// testReceiver is the real remote-write receiver (a Prometheus TSDB) served
// over HTTP from the test process. While unavailable it answers every write
// with 503, which remote write retries.
type testReceiver struct {
	*receiver.Receiver
	srv         *httptest.Server
	unavailable atomic.Bool
	refused     atomic.Int64 // writes answered 503
}

func startReceiver(t testing.TB) *testReceiver {
	t.Helper()
	return startReceiverTLS(t, nil)
}

// startReceiverTLS serves over HTTPS with tlsConfig when it is not nil.
func startReceiverTLS(t testing.TB, tlsConfig *tls.Config) *testReceiver {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := receiver.New(t.TempDir(), logger)
	if err != nil {
		fatal(t, err)
	}
	tr := &testReceiver{Receiver: r}
	h := r.Handler()
	tr.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/api/v1/write" && tr.unavailable.Load() {
			tr.refused.Add(1)
			http.Error(w, "receiver unavailable (e2e)", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	}))
	if tlsConfig != nil {
		tr.srv.TLS = tlsConfig
		tr.srv.StartTLS()
	} else {
		tr.srv.Start()
	}
	t.Cleanup(func() {
		tr.srv.Close()
		if err := r.Close(); err != nil {
			errorf(t, "closing receiver: %v", err)
		}
	})
	return tr
}

func (tr *testReceiver) writeURL() string { return tr.srv.URL + "/api/v1/write" }

// series is one stored series with its labels and samples.
type series struct {
	labels  labels.Labels
	samples []receiver.Sample
}

var metricParser = parser.NewParser(parser.Options{})

// seriesOf returns every stored series of the metric called name.
func (tr *testReceiver) seriesOf(name string) ([]series, error) {
	m := labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, name)
	byKey, err := tr.Samples(m)
	if err != nil {
		return nil, err
	}
	out := make([]series, 0, len(byKey))
	for key, ss := range byKey {
		ls, err := metricParser.ParseMetric(key)
		if err != nil {
			return nil, fmt.Errorf("parsing series key %q: %w", key, err)
		}
		out = append(out, series{labels: ls, samples: ss})
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].labels, out[j].labels) < 0 })
	return out, nil
}

// byInstance groups the series of one metric by their instance label.
func byInstance(ss []series) map[string][]series {
	out := map[string][]series{}
	for _, s := range ss {
		inst := s.labels.Get("instance")
		out[inst] = append(out[inst], s)
	}
	return out
}

// counterValues returns, per instance, the values of the e2e counter, in
// timestamp order; it fails when an instance has more than one series.
func (tr *testReceiver) counterValues() (map[string][]receiver.Sample, error) {
	ss, err := tr.seriesOf(counterMetric)
	if err != nil {
		return nil, err
	}
	out := map[string][]receiver.Sample{}
	for inst, group := range byInstance(ss) {
		if len(group) != 1 {
			return nil, fmt.Errorf("instance %s has %d %s series: %v", inst, len(group), counterMetric, seriesLabels(group))
		}
		out[inst] = group[0].samples
	}
	return out, nil
}

func seriesLabels(ss []series) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.labels.String()
	}
	return strings.Join(parts, ", ")
}

// checkStrictlyIncreasing returns an error naming the first series whose
// timestamps are not strictly increasing or that holds a staleness marker.
func checkSeriesClean(ss []series) error {
	for _, s := range ss {
		for i, smp := range s.samples {
			if smp.IsStale() {
				return fmt.Errorf("series %s has a staleness marker at %s", s.labels, msTime(smp.T))
			}
			if i > 0 && smp.T <= s.samples[i-1].T {
				return fmt.Errorf("series %s: timestamp %d follows %d", s.labels, smp.T, s.samples[i-1].T)
			}
		}
	}
	return nil
}

// missingValues returns the integers in [1, upTo] absent from the counter
// samples, and an error if the values are not strictly increasing or not
// whole numbers.
func missingValues(ss []receiver.Sample, upTo int) ([]int, error) {
	seen := make(map[int]bool, len(ss))
	prev := 0.0
	for i, s := range ss {
		if s.IsStale() {
			return nil, fmt.Errorf("staleness marker at %s", msTime(s.T))
		}
		if s.V != float64(int(s.V)) || s.V < 1 {
			return nil, fmt.Errorf("value %v is not a scrape count", s.V)
		}
		if i > 0 && s.V <= prev {
			return nil, fmt.Errorf("value %v at %s follows %v: not strictly increasing", s.V, msTime(s.T), prev)
		}
		prev = s.V
		seen[int(s.V)] = true
	}
	var missing []int
	for v := 1; v <= upTo; v++ {
		if !seen[v] {
			missing = append(missing, v)
		}
	}
	return missing, nil
}

func maxValue(ss []receiver.Sample) int {
	m := 0
	for _, s := range ss {
		if !s.IsStale() && int(s.V) > m {
			m = int(s.V)
		}
	}
	return m
}

func msTime(ms int64) string { return time.UnixMilli(ms).Format("15:04:05.000") }

// checkNoRejections fails the test if the receiver refused or rolled back
// any sample.
func (tr *testReceiver) checkNoRejections(t testing.TB) {
	t.Helper()
	st := tr.Stats()
	t.Logf("receiver: series=%d accepted=%d stored=%d dropped(exact duplicates)=%d out_of_order=%d too_old=%d duplicate=%d invalid=%d rolled_back=%d",
		st.Series, st.Accepted, st.Stored, st.Dropped, st.OutOfOrder, st.TooOld, st.Duplicate, st.Invalid, st.RolledBack)
	if st.Rejected() != 0 || st.RolledBack != 0 {
		errorf(t, "receiver rejected samples: out_of_order=%d too_old=%d duplicate=%d invalid=%d rolled_back=%d; want all 0",
			st.OutOfOrder, st.TooOld, st.Duplicate, st.Invalid, st.RolledBack)
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
