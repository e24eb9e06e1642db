package main

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
)

// shoal_config_hash has exactly one series, whose hash follows the meaning
// of the configuration, not its formatting.
func TestConfigHash(t *testing.T) {
	dir := t.TempDir()
	logger := promslog.NewNopLogger()
	load := func(body string) string {
		t.Helper()
		p := filepath.Join(dir, "shoal.yml")
		writeFile(t, p, body)
		cfg, err := loadConfig(p, logger)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		g := newConfigHashGauge()
		reg.MustRegister(g)
		setConfigHash(g, cfg)
		setConfigHash(g, cfg) // a reload of the same file keeps one series
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != 1 || mfs[0].GetName() != configHashName || len(mfs[0].GetMetric()) != 1 {
			t.Fatalf("want one %s series, got %v", configHashName, mfs)
		}
		m := mfs[0].GetMetric()[0]
		if m.GetGauge().GetValue() != 1 || len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "sha256" || len(m.GetLabel()[0].GetValue()) != 64 {
			t.Fatalf("want {sha256=<64 hex>} 1, got %v", m)
		}
		return m.GetLabel()[0].GetValue()
	}
	a := load("scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:1']}]\n")
	// Same configuration, other formatting and a comment.
	b := load("# comment\nscrape_configs:\n- job_name: a\n  static_configs:\n  - targets:\n    - 127.0.0.1:1\n")
	c := load("scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:2']}]\n")
	if a != b {
		t.Errorf("reformatting changed the hash: %s vs %s", a, b)
	}
	if a == c {
		t.Errorf("a different target kept the hash %s", a)
	}
	// Scrape configs read from scrape_config_files count too.
	writeFile(t, filepath.Join(dir, "jobs.yml"), "scrape_configs:\n  - job_name: x\n    static_configs: [{targets: ['127.0.0.1:3']}]\n")
	d := load("scrape_config_files: [jobs.yml]\n")
	writeFile(t, filepath.Join(dir, "jobs.yml"), "scrape_configs:\n  - job_name: x\n    static_configs: [{targets: ['127.0.0.1:4']}]\n")
	e := load("scrape_config_files: [jobs.yml]\n")
	if d == e {
		t.Errorf("a change in a scrape_config_files file kept the hash %s", d)
	}
}
