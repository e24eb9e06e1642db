// Command shoal-image builds shoal's container image as an OCI image layout
// without a container engine (internal/ociimage): a multi-platform index of
// static binaries, non-root, with a CA bundle and an empty storage volume,
// reproducible, with an SPDX SBOM per platform. `make image` runs it; it
// prints the digests and the size.
//
//	go run ./cmd/shoal-image -out build/image -sbom-dir build/sbom \
//	    -platforms linux/amd64,linux/arm64 -version v0.1.0
//
// Push the layout with crane or skopeo (docs/development.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shoal-dev/shoal/internal/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shoal-image:", err)
		os.Exit(1)
	}
}

func run() error {
	var o ociimage.Options
	var platforms, epoch string
	flag.StringVar(&o.Out, "out", "build/image", "OCI layout directory to write (replaced)")
	flag.StringVar(&o.SBOMDir, "sbom-dir", "build/sbom", "directory for the SPDX SBOMs, one per platform (empty: only in the layout)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.StringVar(&o.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to install as "+ociimage.CABundlePath)
	flag.StringVar(&o.Version, "version", "dev", "version stamped into the binary, the labels and the tag")
	flag.StringVar(&o.Revision, "revision", "unknown", "source revision stamped into the binary and the labels")
	flag.StringVar(&o.Tag, "tag", "", "org.opencontainers.image.ref.name of the index in the layout (default: -version)")
	flag.StringVar(&o.BuildTags, "tags", "", "go build tags (full_sd: every service discovery Prometheus has; without it the Kubernetes, file, DNS, HTTP and Consul ones)")
	flag.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix seconds for every timestamp (default $SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&o.ModuleDir, "module-dir", ".", "module root to build in")
	flag.Parse()

	var err error
	if o.Platforms, err = parsePlatforms(platforms); err != nil {
		return err
	}
	if epoch != "" {
		secs, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("-source-date-epoch %q: %w", epoch, err)
		}
		o.Epoch = time.Unix(secs, 0)
	}
	o.Log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := ociimage.Build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("layout: %s\nindex:  %s\n", o.Out, res.Index)
	keys := make([]string, 0, len(res.Images))
	for k := range res.Images {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("image %-12s %s (SBOM %s)\n", k, res.Images[k], res.SBOMs[k])
	}
	fmt.Printf("size:   %.1f MiB of blobs\n", float64(res.Size)/(1<<20))
	return nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("-platforms: %q is not os/arch", f)
		}
		out = append(out, *p)
	}
	return out, nil
}
