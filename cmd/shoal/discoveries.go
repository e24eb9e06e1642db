package main

// The service discoveries of this build (internal/sdbuild: the ones a
// Kubernetes deployment uses by default, every one with -tags full_sd).
import _ "github.com/shoal-dev/shoal/internal/sdbuild"
