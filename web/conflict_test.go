package web

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/testutil"
)

func startClusterNode(t *testing.T, name string, join ...string) *cluster.Node {
	t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.NodeName, cfg.ListenAddr, cfg.Join, cfg.RejoinInterval = name, "127.0.0.1:0", join, 0
	n, err := cluster.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return n
}

// Two real gossip nodes with one name: the status page of the first says
// so, with both addresses.
func TestStatusPageShowsNameConflict(t *testing.T) {
	a := startClusterNode(t, "dup")
	srv := httptest.NewServer(New(Options{NodeName: "dup", Cluster: a, Gatherer: prometheus.NewRegistry()}, promslog.NewNopLogger()))
	t.Cleanup(srv.Close)
	page := func() string {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := page(); strings.Contains(p, "name-conflict") {
		t.Fatal("conflict shown before any")
	}

	b := startClusterNode(t, "dup", a.Self().Addr)
	testutil.Eventually(t, 10*time.Second, "conflict on the page", func() error {
		p := page()
		for _, want := range []string{`id="name-conflict"`, "Two nodes claim the name dup", a.Self().Addr, b.Self().Addr} {
			if !strings.Contains(p, want) {
				return fmt.Errorf("page lacks %q", want)
			}
		}
		return nil
	})
}
