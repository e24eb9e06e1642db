//go:build !full_sd

package sdbuild

import (
	_ "github.com/prometheus/prometheus/discovery/consul"
	_ "github.com/prometheus/prometheus/discovery/dns"
	_ "github.com/prometheus/prometheus/discovery/file"
	_ "github.com/prometheus/prometheus/discovery/http"
	_ "github.com/prometheus/prometheus/discovery/kubernetes"
)

const full = false
