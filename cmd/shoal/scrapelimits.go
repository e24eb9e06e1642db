package main

import (
	"github.com/alecthomas/units"
	"github.com/prometheus/prometheus/config"
)

// defaultBodySizeLimit replaces Prometheus' "no limit" (body_size_limit: 0)
// for scrape bodies. Prometheus reads the whole body into memory before
// parsing it: one target streaming without end held about 1 GiB after a
// 500ms scrape_timeout (e2e/TestScrapeBadInput), enough to have the agent
// killed for memory with the default 10s. 100 MiB leaves room for the
// largest real exporters (kube-state-metrics of big clusters); set
// body_size_limit higher for a job that needs more.
const defaultBodySizeLimit = 100 * units.MiB

// applyScrapeDefaults sets shoal's defaults where the configuration leaves
// Prometheus' unlimited zero. The global value is what jobs of
// scrape_config_files inherit when GetScrapeConfigs reads them.
func applyScrapeDefaults(cfg *config.Config) {
	if cfg.GlobalConfig.BodySizeLimit == 0 {
		cfg.GlobalConfig.BodySizeLimit = defaultBodySizeLimit
	}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.BodySizeLimit == 0 {
			sc.BodySizeLimit = cfg.GlobalConfig.BodySizeLimit
		}
	}
}
