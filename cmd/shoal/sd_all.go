//go:build !slim_sd

package main

// Every service discovery Prometheus has (the default build). See
// sd_slim.go for the smaller set.
import _ "github.com/prometheus/prometheus/discovery/install"
