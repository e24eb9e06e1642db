// Package testutil holds the helpers the tests of several packages share:
// polling for a condition instead of sleeping, and reading a metric from a
// registry or from a /metrics page.
package testutil

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-dev/shoal/internal/promtext"
)

// PollInterval is how often Poll and Eventually re-check their condition.
const PollInterval = 20 * time.Millisecond

// Poll calls f until it returns nil or timeout passes, and returns f's last
// error. Under testing/synctest the wait costs no real time.
func Poll(timeout time.Duration, f func() error) error {
	return PollEvery(PollInterval, timeout, f)
}

// PollEvery is Poll re-checking every interval, for conditions that cost
// more to check than PollInterval allows (e2e's HTTP round trips).
func PollEvery(interval, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// Eventually fails the test with f's last error when f has not returned nil
// within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := Poll(timeout, f); err != nil {
		t.Fatalf("%s: not reached within %v: %v", what, timeout, err)
	}
}

// EventuallyTrue is Eventually for a condition without an error to report.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("condition false")
	})
}

// Families gathers g into a map by family name.
func Families(g prometheus.Gatherer) (map[string]*dto.MetricFamily, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// ParseText reads a /metrics page in the text exposition format.
func ParseText(r io.Reader) (map[string]*dto.MetricFamily, error) { return promtext.Parse(r) }

// Value is promtext.Value: the sum over the series of family name whose
// labels include want, an error when none matches.
func Value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, error) {
	return promtext.Value(mfs, name, want)
}

// GatherValue is Value on what g gathers now.
func GatherValue(g prometheus.Gatherer, name string, want map[string]string) (float64, error) {
	mfs, err := Families(g)
	if err != nil {
		return 0, err
	}
	return Value(mfs, name, want)
}

// LabelsMatch reports whether lps has every name=value pair of want.
func LabelsMatch(lps []*dto.LabelPair, want map[string]string) bool {
	return promtext.LabelsMatch(lps, want)
}

// InCI reports whether the tests run in CI (CI=true or 1, as .ci/run sets
// it), where a missing prerequisite fails a test instead of skipping it.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Skipper is the part of testing.TB that Unavailable uses.
type Skipper interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// Unavailable ends a test whose prerequisite (a tool, a privilege) this
// machine lacks: it skips it, saying so, and in CI fails it instead, so
// that CI never passes by skipping.
func Unavailable(t Skipper, why string) {
	t.Helper()
	if InCI() {
		t.Fatal(why + " (skipped elsewhere, a failure in CI)")
	} else {
		t.Skip(why + " (CI would fail here)")
	}
}
