package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/promslog"
)

// fuzzConfigSeed is a realistic configuration: global settings, relabelling,
// static and file discovery, remote write with queue and metadata settings,
// and a scrape_config_files glob.
const fuzzConfigSeed = `global:
  scrape_interval: 15s
  scrape_timeout: 10s
  external_labels: {cluster: prod}
scrape_config_files: ["jobs/*.yml"]
scrape_configs:
  - job_name: node
    sample_limit: 10000
    label_limit: 64
    body_size_limit: 10MB
    static_configs:
      - targets: ["10.0.0.1:9100", "10.0.0.2:9100"]
        labels: {team: infra}
    relabel_configs:
      - source_labels: [__address__]
        regex: '([^:]+):\d+'
        target_label: host
        replacement: '$1'
    metric_relabel_configs:
      - action: drop
        source_labels: [__name__]
        regex: go_gc_.*
  - job_name: files
    file_sd_configs:
      - files: ["targets/*.json"]
        refresh_interval: 1m
remote_write:
  - url: https://mimir.example/api/v1/push
    name: mimir
    basic_auth: {username: shoal, password: secret}
    queue_config: {capacity: 10000, max_shards: 8, batch_send_deadline: 5s}
    metadata_config: {send: true, send_interval: 1m}
    write_relabel_configs:
      - action: labeldrop
        regex: tmp_.*
`

// FuzzLoadConfig runs arbitrary YAML through the configuration loader the
// agent uses at start and on reload: an error that names the file, or a
// configuration whose scrape configs are all there, never a panic.
func FuzzLoadConfig(f *testing.F) {
	logger := promslog.NewNopLogger()
	f.Add(fuzzConfigSeed)
	// The loader's own rendering of the seed (secrets redacted) is a valid
	// input too.
	dir := f.TempDir()
	p := filepath.Join(dir, "shoal.yml")
	if err := os.WriteFile(p, []byte(fuzzConfigSeed), 0o644); err != nil {
		f.Fatal(err)
	}
	cfg, err := loadConfig(p, logger)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg.String())
	for _, s := range []string{
		"",
		"scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:1']}]\n",
		"scrape_configs:\n  - job_name: a\n  - job_name: a\n",                                // duplicate job
		"global:\n  scrape_interval: 1parsec\n",                                              // bad duration
		"scrape_configs:\n  - job_name: a\n    relabel_configs: [{regex: '(['}]\n",           // bad regexp
		"scrape_configs:\n  - job_name: a\n    no_such_field: 1\n",                           // unknown field
		"scrape_config_files: [missing/*.yml, '[']\n",                                        // bad glob
		"remote_write:\n  - url: ':/nope'\n",                                                 // bad URL
		"a: &a [*a, *a]\n",                                                                   // alias loop
		"scrape_configs:\n\t- job_name: tab\n",                                               // tab indentation
		"global: {scrape_interval: 1s, scrape_timeout: 2s}\nscrape_configs: [{job_name: x}]", // timeout > interval
	} {
		f.Add(s)
	}
	// One directory per worker process: runs follow each other in it.
	path := filepath.Join(f.TempDir(), "shoal.yml")
	f.Fuzz(func(t *testing.T, yml string) {
		if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(path, logger)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if cfg == nil {
			t.Fatal("no error and no configuration")
		}
		scfgs, err := cfg.GetScrapeConfigs()
		if err != nil {
			t.Fatalf("a loaded configuration's scrape configs fail: %v", err)
		}
		seen := map[string]bool{}
		for _, sc := range scfgs {
			if sc == nil || sc.JobName == "" || seen[sc.JobName] {
				t.Fatalf("loaded a scrape config with a missing or duplicate job name: %+v", sc)
			}
			seen[sc.JobName] = true
		}
	})
}
