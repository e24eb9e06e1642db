//go:build full_sd

package sdbuild

import _ "github.com/prometheus/prometheus/discovery/install"

const full = true
