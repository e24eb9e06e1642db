// Package ociimage assembles shoal's container image as an OCI image layout
// without a container engine (go-containerregistry writes the layout): per
// platform a static binary, the CA bundle, a non-root user (65532) and an
// empty storage directory declared as a volume, nothing else. The result is
// reproducible: fixed flags for go build, fixed timestamps, sorted tar
// entries, so the same source, toolchain and CA bundle give the same
// digests. Each platform's image has an SPDX 2.3 SBOM of the binary's Go
// modules, attached as an OCI referrer in the layout and written beside it.
package ociimage

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What every image holds and how it runs; the chart and docs rely on these.
const (
	// Repository is the name the image is published under, the chart's
	// default image.repository.
	Repository = "ghcr.io/shoal-dev/shoal"
	// UID and GID of the user the image runs as (named nonroot).
	UID = 65532
	GID = 65532
	// BinaryPath is the entrypoint.
	BinaryPath = "/bin/shoal"
	// CABundlePath is where Go's crypto/x509 looks first on Linux.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// StoragePath is the empty directory owned by UID, declared a volume:
	// the only path the agent writes.
	StoragePath = "/data"
	// ConfigPath is the configuration file the default command names.
	ConfigPath = "/etc/shoal/shoal.yml"
	// SBOMArtifactType marks the SBOM referrers in the layout.
	SBOMArtifactType = "application/spdx+json"
)

// Options say what to build. Zero fields take the defaults named on them
// (withDefaults applies them).
type Options struct {
	// ModuleDir is the module root where go build runs. Required.
	ModuleDir string
	// Out is the OCI layout directory; it is replaced. Required.
	Out string
	// SBOMDir receives one <os>-<arch>.spdx.json per platform besides the
	// copies in the layout (empty: none).
	SBOMDir string
	// Package to build (default ./cmd/shoal).
	Package string
	// Platforms (default linux/amd64 and linux/arm64).
	Platforms []v1.Platform
	// CABundle is the PEM file copied to CABundlePath (default the
	// machine's /etc/ssl/certs/ca-certificates.crt).
	CABundle string
	// Version and Revision are stamped into the binary and the labels
	// (default "dev" and "unknown").
	Version, Revision string
	// Tag is the layout's org.opencontainers.image.ref.name (default Version).
	Tag string
	// BuildTags are passed to go build -tags.
	BuildTags string
	// Epoch is every timestamp in the image (zero: the Unix epoch).
	Epoch time.Time
	// Go is the go command (default "go").
	Go string
	// Log receives progress lines (nil: none).
	Log func(format string, args ...any)
}

// DefaultPlatforms are the platforms of a release image.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

func (o Options) withDefaults() Options {
	if o.Package == "" {
		o.Package = "./cmd/shoal"
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.CABundle == "" {
		o.CABundle = "/etc/ssl/certs/ca-certificates.crt"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Revision == "" {
		o.Revision = "unknown"
	}
	if o.Tag == "" {
		o.Tag = o.Version
	}
	if o.Epoch.IsZero() {
		o.Epoch = time.Unix(0, 0)
	}
	o.Epoch = o.Epoch.UTC()
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return o
}

// Result names what Build wrote.
type Result struct {
	// Index is the digest of the multi-platform image index.
	Index v1.Hash
	// Images maps "os/arch" to the digest of that platform's image manifest.
	Images map[string]v1.Hash
	// SBOMs maps "os/arch" to the digest of the SBOM referrer manifest.
	SBOMs map[string]v1.Hash
	// Size is the bytes of every blob in the layout (what a registry stores).
	Size int64
}

// platformImage is one platform's image and SBOM before they are written.
type platformImage struct {
	platform v1.Platform
	image    v1.Image
	sbom     []byte
}

// Build compiles the binary for every platform, assembles the images and
// their index and writes them to o.Out as an OCI layout.
func Build(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	if o.ModuleDir == "" || o.Out == "" {
		return nil, errors.New("ociimage: ModuleDir and Out are required")
	}
	ca, err := readCABundle(o.CABundle)
	if err != nil {
		return nil, err
	}
	base, err := baseLayer(ca, o.Epoch)
	if err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "shoal-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)

	var images []platformImage
	for _, p := range o.Platforms {
		bin := filepath.Join(binDir, p.OS+"-"+p.Architecture, "shoal")
		o.Log("building %s for %s/%s", o.Package, p.OS, p.Architecture)
		if err := goBuild(ctx, o, p, bin); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		bi, err := readBuildInfo(data)
		if err != nil {
			return nil, err
		}
		pi, err := assemble(o, p, base, data, bi)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		images = append(images, pi)
	}
	return writeLayout(o, images)
}

// readCABundle reads the bundle and refuses one without a certificate: an
// image that trusts nothing fails only at its first HTTPS request.
func readCABundle(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", path)
	}
	return data, nil
}

// assemble makes one platform's image from the shared base layer and the
// binary, and the binary's SBOM from its build information.
func assemble(o Options, p v1.Platform, base v1.Layer, data []byte, bi *debug.BuildInfo) (platformImage, error) {
	binLayer, err := binaryLayer(data, o.Epoch)
	if err != nil {
		return platformImage{}, err
	}
	img, err := image(o, p, base, binLayer)
	if err != nil {
		return platformImage{}, err
	}
	sbom, err := SBOM(data, bi, p, o.Version, o.Epoch)
	if err != nil {
		return platformImage{}, err
	}
	return platformImage{platform: p, image: img, sbom: sbom}, nil
}

// image sets the configuration a runtime reads: user, entrypoint, default
// command, volume, ports and labels, all timestamps at the epoch.
func image(o Options, p v1.Platform, base, bin v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: o.Epoch}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", UID, GID),
			Entrypoint: []string{BinaryPath},
			Cmd:        []string{"--config.file=" + ConfigPath, "--storage.path=" + StoragePath},
			WorkingDir: "/",
			Env:        []string{"PATH=/bin"},
			Volumes:    map[string]struct{}{StoragePath: {}},
			ExposedPorts: map[string]struct{}{
				"9940/tcp": {}, "7946/tcp": {}, "7946/udp": {},
			},
			Labels: labels(o),
		},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "shoal-image: CA bundle, /etc/passwd and /etc/group (nonroot 65532), " + StoragePath,
		}},
		mutate.Addendum{Layer: bin, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "shoal-image: " + BinaryPath + " (CGO_ENABLED=0 go build -trimpath)",
		}},
	)
}

// labels are the OCI annotations, on the image config and on the index.
func labels(o Options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "shoal",
		"org.opencontainers.image.description": "Gossip-clustered, peer-to-peer Prometheus scrape agent",
		"org.opencontainers.image.source":      "https://github.com/shoal-dev/shoal",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Epoch.Format(time.RFC3339),
	}
}
