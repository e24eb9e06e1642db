//go:build slim_sd

package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// The slim build loads the discoveries it keeps and names the field of one
// it left out.
func TestSlimSDSet(t *testing.T) {
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
		t.Errorf("slim build refuses a discovery it keeps: %v", err)
	}
	left := filepath.Join(dir, "left.yml")
	writeFile(t, left, "scrape_configs:\n- job_name: e\n  ec2_sd_configs: [{region: eu-west-1}]\n")
	if _, err := loadConfig(left, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "ec2_sd_configs") {
		t.Errorf("slim build with ec2_sd_configs: err = %v, want one naming ec2_sd_configs", err)
	}
}
