package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"

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
func setConfigHash(reg prometheus.Registerer, logger *slog.Logger, cfg *config.Config) {
	g, err := configHashGauge(reg)
	if err != nil {
		logger.Error("Cannot register the configuration hash metric", "metric", configHashName, "err", err)
		return
	}
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

// configHashGauge registers the gauge on first use, and finds it on the
// registry afterwards, so that the agent needs no field for it.
func configHashGauge(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: configHashName,
		Help: "1 for the SHA-256 of the configuration in force (secrets masked); nodes of one cluster should all show the same hash.",
	}, []string{"sha256"})
	err := reg.Register(g)
	if err == nil {
		return g, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
			return existing, nil
		}
	}
	return nil, err
}
