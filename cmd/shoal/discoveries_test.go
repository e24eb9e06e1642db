//go:build !full_sd

package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultBuildLoadsItsDiscoveriesAndSaysWhereTheOthersAre: the
// default build loads the discoveries it keeps, and a file with one it
// left out is refused naming the field and the full build.
func TestDefaultBuildLoadsItsDiscoveriesAndSaysWhereTheOthersAre(t *testing.T) {
	dir := t.TempDir()
	kept := filepath.Join(dir, "kept.yml")
	writeFile(t, kept, `scrape_configs:
- job_name: k
  kubernetes_sd_configs: [{role: pod}]
- job_name: f
  file_sd_configs: [{files: [targets.json]}]
- job_name: d
  dns_sd_configs: [{names: [example.org], type: A, port: 9100}]
- job_name: h
  http_sd_configs: [{url: "http://127.0.0.1:1/sd"}]
- job_name: c
  consul_sd_configs: [{server: "127.0.0.1:8500"}]
`)
	if _, err := loadConfig(kept, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("the default build refuses a discovery it keeps: %v", err)
	}
	left := filepath.Join(dir, "left.yml")
	writeFile(t, left, "scrape_configs:\n- job_name: e\n  ec2_sd_configs: [{region: eu-west-1}]\n")
	_, err := loadConfig(left, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "ec2_sd_configs: not in this build") || !strings.Contains(err.Error(), "-full") {
		t.Errorf("the default build with ec2_sd_configs: err = %v, want one naming ec2_sd_configs and the full build", err)
	}
}
