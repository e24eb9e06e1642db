package web

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/testutil"
)

// The status page and /api/v1/status/node say how gossip is protected,
// never with what secret.
func TestStatusShowsGossipEncryption(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "gossip CA")
	cfg := cluster.DefaultConfig()
	cfg.NodeName, cfg.ListenAddr = "n1", "127.0.0.1:0"
	cfg.TLS = cluster.TLSConfig{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	ca.WriteCA(t, cfg.TLS.CAFile)
	ca.Issue(t, "n1", cfg.TLS.CertFile, cfg.TLS.KeyFile, testutil.LeafOptions{})
	const secret = "SECRET-gossip-key-of-32-bytes!!!"
	cfg.SecretKey = []byte(secret)
	n, err := cluster.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{NodeName: "n1", Cluster: n, Gatherer: prometheus.NewRegistry()}, promslog.NewNopLogger()))
	t.Cleanup(srv.Close)
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), secret) {
			t.Errorf("%s shows the gossip key", path)
		}
		return string(b)
	}
	if p := html.UnescapeString(get("/")); !strings.Contains(p, `gossip encryption: <b id="gossip-encryption">tls+key</b>`) {
		t.Errorf("status page does not show the gossip encryption")
	}
	var r struct {
		Data NodeStatus `json:"data"`
	}
	if err := json.Unmarshal([]byte(get("/api/v1/status/node")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Data.GossipEncryption != "tls+key" {
		t.Errorf("gossipEncryption = %q, want tls+key", r.Data.GossipEncryption)
	}
}
