package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
)

type parsed struct {
	values map[string]float64 // series (labels string) -> value
	types  map[string]string  // family -> type
}

func scrape(t *testing.T, addr string) parsed {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", addr, resp.StatusCode)
	}
	p, err := textparse.New(body, resp.Header.Get("Content-Type"), nil, textparse.ParserOptions{})
	if err != nil {
		t.Fatalf("content type %q: %v", resp.Header.Get("Content-Type"), err)
	}
	out := parsed{values: map[string]float64{}, types: map[string]string{}}
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: exposition does not parse: %v", addr, err)
		}
		switch e {
		case textparse.EntryType:
			name, typ := p.Type()
			out.types[string(name)] = string(typ)
		case textparse.EntrySeries:
			_, ts, v := p.Series()
			if ts != nil {
				t.Fatalf("series carries an explicit timestamp")
			}
			if value.IsStaleNaN(v) {
				t.Fatalf("stale marker exposed")
			}
			var l labels.Labels
			p.Labels(&l)
			key := l.String()
			if _, dup := out.values[key]; dup {
				t.Fatalf("duplicate series %s", key)
			}
			out.values[key] = v
		case textparse.EntryHistogram:
			t.Fatalf("unexpected native histogram")
		}
	}
	return out
}

func TestExpositionParsesAndMatchesFlags(t *testing.T) {
	cfg := Config{Targets: 5, Series: 300, Skew: 4, LargeFraction: 0.2}
	s, err := Start(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := cfg.Sizes()
	if got := len(s.Addrs()); got != 5 {
		t.Fatalf("%d targets, want 5", got)
	}
	large := 0
	for i, addr := range s.Addrs() {
		first := scrape(t, addr)
		if len(first.values) != sizes[i] {
			t.Errorf("target %d: %d series, want %d", i, len(first.values), sizes[i])
		}
		if sizes[i] == 1200 {
			large++
		}
		for _, typ := range []string{"counter", "gauge", "histogram"} {
			found := false
			for _, tt := range first.types {
				found = found || tt == typ
			}
			if !found {
				t.Errorf("target %d exposes no %s", i, typ)
			}
		}
		second := scrape(t, addr)
		changed := 0
		for k, v := range second.values {
			old, ok := first.values[k]
			if !ok {
				t.Fatalf("series %s appeared on the second scrape", k)
			}
			if v != old {
				changed++
			}
		}
		// Counters and histograms always advance; a gauge may by chance
		// repeat its value, so allow a handful.
		if changed < len(second.values)-3 {
			t.Errorf("target %d: only %d of %d series changed between scrapes", i, changed, len(second.values))
		}
	}
	if large != 1 {
		t.Errorf("%d large targets of 1200 series, want 1", large)
	}
	if got, want := s.Scrapes(), int64(10); got != want {
		t.Errorf("Scrapes() = %d, want %d", got, want)
	}
}

func TestHistogramsAreCumulative(t *testing.T) {
	s, err := Start(t.Context(), Config{Targets: 1, Series: 130, HistogramFraction: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := scrape(t, s.Addrs()[0])
	hists := 0
	for h := 0; ; h++ {
		name := "loadgen_latency_" + strconv.Itoa(h) + "_seconds"
		if p.types[name] != "histogram" {
			break
		}
		hists++
		key := func(suffix string, extra ...string) string {
			return labels.FromStrings(append([]string{"__name__", name + suffix, "method", "GET", "route", "/r" + strconv.Itoa(h)}, extra...)...).String()
		}
		prev := -1.0
		for _, le := range histogramBounds {
			// The parser normalises le values to the OpenMetrics form (1 -> 1.0).
			les := strconv.FormatFloat(le, 'g', -1, 64)
			if le == math.Trunc(le) {
				les += ".0"
			}
			v, ok := p.values[key("_bucket", "le", les)]
			if !ok {
				t.Fatalf("%s: no bucket le=%s", name, les)
			}
			if v < prev {
				t.Fatalf("%s: bucket le=%v (%v) below the previous one (%v)", name, le, v, prev)
			}
			prev = v
		}
		inf, count := p.values[key("_bucket", "le", "+Inf")], p.values[key("_count")]
		if inf < prev || inf != count || inf == 0 {
			t.Fatalf("%s: +Inf bucket %v, last bucket %v, count %v", name, inf, prev, count)
		}
	}
	if hists != 10 {
		t.Fatalf("%d histograms in 130 series, want 10", hists)
	}
}

func TestSkewDistribution(t *testing.T) {
	cfg := Config{Targets: 1000, Series: 100, Skew: 50, LargeFraction: 0.01}
	sizes := cfg.Sizes()
	var largeIdx []int
	for i, n := range sizes {
		switch n {
		case 5000:
			largeIdx = append(largeIdx, i)
		case 100:
		default:
			t.Fatalf("target %d has %d series, want 100 or 5000", i, n)
		}
	}
	if len(largeIdx) != 10 {
		t.Fatalf("%d large targets, want 10 (1%% of 1000)", len(largeIdx))
	}
	for k := 1; k < len(largeIdx); k++ {
		if gap := largeIdx[k] - largeIdx[k-1]; gap != 100 {
			t.Fatalf("large targets at %v are not evenly spread", largeIdx)
		}
	}
	if got, want := cfg.TotalSeries(), 990*100+10*5000; got != want {
		t.Fatalf("TotalSeries = %d, want %d", got, want)
	}

	// Uniform: no skew means every target has the same size.
	for _, sk := range []float64{0, 1} {
		for i, n := range (Config{Targets: 50, Series: 7, Skew: sk}).Sizes() {
			if n != 7 {
				t.Fatalf("skew %v: target %d has %d series", sk, i, n)
			}
		}
	}
	// A tiny fraction still yields one large target.
	if got := (Config{Targets: 3, Series: 10, Skew: 3, LargeFraction: 0.01}).TotalSeries(); got != 50 {
		t.Fatalf("TotalSeries = %d, want 50 (one large target of 30)", got)
	}
}

func TestFileSDAndPorts(t *testing.T) {
	// Three consecutive free ports, below the kernel's ephemeral range
	// (32768 and up): there, the client ends of the connections that tests
	// running beside this one open take ports too, and five tries of a
	// base the kernel had just handed out all met one in a make test.
	var s *Server
	var err error
	for try := 0; try < 20 && s == nil; try++ {
		base := 20000 + rand.IntN(12000)
		s, err = Start(context.Background(), Config{Targets: 3, Series: 10, BasePort: base, Skew: 2, LargeFraction: 0.3}, nil)
		if err == nil {
			for i, a := range s.Addrs() {
				if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)); a != want {
					t.Fatalf("target %d listens on %s, want %s", i, a, want)
				}
			}
		}
	}
	if s == nil {
		t.Fatalf("no free port range: %v", err)
	}
	defer s.Close()

	path := filepath.Join(t.TempDir(), "targets.json")
	if err := s.WriteFileSD(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	if err := json.Unmarshal(b, &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 {
		t.Fatalf("%d groups, want 3", len(groups))
	}
	larges := 0
	for i, g := range groups {
		if len(g.Targets) != 1 || g.Targets[0] != s.Addrs()[i] {
			t.Fatalf("group %d lists %v, want %s", i, g.Targets, s.Addrs()[i])
		}
		if g.Labels["size"] == "large" {
			larges++
		}
	}
	if larges != 1 {
		t.Fatalf("%d groups labelled large, want 1", larges)
	}
}

func TestPortTakenAndBadConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if _, err := Start(t.Context(), Config{Targets: 1, BasePort: port}, nil); err == nil {
		t.Fatal("Start on a taken port succeeded")
	}
	for _, c := range []Config{{Targets: -1}, {Series: -5}, {Skew: -2}, {LargeFraction: 2}, {BasePort: 65535, Targets: 3}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted a bad config", c)
		}
	}
}

func TestUnknownPath(t *testing.T) {
	s, err := Start(t.Context(), Config{Targets: 1, Series: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addrs()[0] + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
}
