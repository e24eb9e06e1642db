package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/cluster"
)

// A replica on another scrape configuration is named on the status page and
// in /api/v1/status/node, and a node that steps aside says so.
func TestStatusShowsConfigDriftAndSteppingAside(t *testing.T) {
	cfg := cluster.DefaultConfig()
	cfg.NodeName, cfg.ListenAddr = "n1", "127.0.0.1:0"
	n, err := cluster.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sc := ScrapeConfigStatus{Current: "0000aaaa", PlacingBy: "0000bbbb", Rule: "majority", SteppedAside: true, Drift: []string{"n2", "n3"}}
	srv := httptest.NewServer(New(Options{NodeName: "n1", Cluster: n, Gatherer: prometheus.NewRegistry(),
		ScrapeConfig: func() ScrapeConfigStatus { return sc }}, promslog.NewNopLogger()))
	t.Cleanup(srv.Close)
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	page := get("/")
	for _, want := range []string{`id="config-drift"`, "n2, n3", `id="stepped-aside"`, "0000bbbb"} {
		if !strings.Contains(page, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	var r struct {
		Data NodeStatus `json:"data"`
	}
	if err := json.Unmarshal([]byte(get("/api/v1/status/node")), &r); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Data.ConfigDrift, ","); got != "n2,n3" {
		t.Errorf("configDrift = %q, want n2,n3", got)
	}
	if s := r.Data.ScrapeConfig; s == nil || !s.SteppedAside || s.PlacingBy != "0000bbbb" || s.Current != "0000aaaa" {
		t.Errorf("scrapeConfig = %+v", s)
	}

	sc = ScrapeConfigStatus{Current: "0000bbbb", PlacingBy: "0000bbbb", Rule: "unanimous"}
	page = get("/")
	if strings.Contains(page, `id="config-drift"`) || strings.Contains(page, `id="stepped-aside"`) {
		t.Error("status page warns although every peer runs this node's configuration")
	}
}
