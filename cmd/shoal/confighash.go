package main

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"
	"go.yaml.in/yaml/v2"
)

// configHashName is the gauge that tells nodes running different
// configurations apart (the ClusterConfigurationDrift alert), like Grafana
// Alloy's alloy_config_hash.
const configHashName = "shoal_config_hash"

// setConfigHash exports shoal_config_hash{sha256="..."} 1 for the configuration
// now in force, replacing the previous hash. The hash covers the loaded
// configuration with secrets masked (Prometheus' own marshalling) and the
// scrape configs read from scrape_config_files, so that formatting and
// comments do not count as drift and no secret can be guessed from it.
func setConfigHash(g *prometheus.GaugeVec, cfg *config.Config) {
	g.Reset()
	g.WithLabelValues(configHash(cfg)).Set(1)
}

// configHash is the hex SHA-256 of the configuration as shoal applies it.
func configHash(cfg *config.Config) string {
	h := sha256.New()
	h.Write([]byte(cfg.String()))
	if scfgs, err := cfg.GetScrapeConfigs(); err == nil {
		// Each scrape config on its own: GetScrapeConfigs returns the
		// inline ones too, in file order, and they marshal with secrets masked.
		for _, sc := range scfgs {
			b, err := yaml.Marshal(sc)
			if err != nil {
				continue
			}
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// newConfigHashGauge is shoal_config_hash, for setConfigHash.
func newConfigHashGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: configHashName,
		Help: "1 for the SHA-256 of the configuration in force (secrets masked); nodes of one cluster should all show the same hash.",
	}, []string{"sha256"})
}
