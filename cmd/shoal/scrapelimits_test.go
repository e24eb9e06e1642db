package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/alecthomas/units"
)

// A job without body_size_limit gets shoal's default, in the main file and
// in scrape_config_files; an explicit limit (global or per job) is kept.
func TestDefaultBodySizeLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("more.yml", "scrape_configs:\n  - job_name: from_file\n    static_configs: [{targets: ['a:1']}]\n")
	main := write("shoal.yml", `
scrape_config_files: [`+filepath.Join(dir, "more.yml")+`]
scrape_configs:
  - job_name: unset
    static_configs: [{targets: ['a:1']}]
  - job_name: explicit
    body_size_limit: 1GB
    static_configs: [{targets: ['a:1']}]
`)
	check := func(path string, want map[string]units.Base2Bytes) {
		t.Helper()
		cfg, err := loadConfig(path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		scfgs, err := cfg.GetScrapeConfigs()
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range scfgs {
			if got := sc.BodySizeLimit; got != want[sc.JobName] {
				t.Errorf("%s: body_size_limit %v, want %v", sc.JobName, got, want[sc.JobName])
			}
		}
	}
	check(main, map[string]units.Base2Bytes{"unset": defaultBodySizeLimit, "explicit": units.GiB, "from_file": defaultBodySizeLimit})

	global := write("global.yml", `
global: {body_size_limit: 5MB}
scrape_config_files: [`+filepath.Join(dir, "more.yml")+`]
scrape_configs:
  - job_name: unset
    static_configs: [{targets: ['a:1']}]
`)
	check(global, map[string]units.Base2Bytes{"unset": 5 * units.MiB, "from_file": 5 * units.MiB})
}
