package ociimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// testBuildInfo stands for a binary's build information, with a replaced
// module.
var testBuildInfo = &debug.BuildInfo{
	GoVersion: "go1.26.8",
	Main:      debug.Module{Path: "github.com/shoal-dev/shoal", Version: "(devel)"},
	Deps: []*debug.Module{
		{Path: "github.com/google/go-containerregistry", Version: "v0.22.1", Sum: "h1:x"},
		{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}},
	},
	Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "0"}},
}

// testImages assembles the layout from a small stand-in binary instead of
// a go build of shoal (which e2e's TestImage does).
func testImages(t *testing.T, out, ca string, epoch time.Time) *Result {
	t.Helper()
	o := Options{ModuleDir: ".", Out: out, SBOMDir: out + "-sbom", CABundle: ca, Version: "v9.9.9", Epoch: epoch}.withDefaults()
	caData, err := readCABundle(o.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	base, err := baseLayer(caData, o.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := assemble(o, v1.Platform{OS: "linux", Architecture: "amd64"}, base, []byte("stand-in binary"), testBuildInfo)
	if err != nil {
		t.Fatal(err)
	}
	res, err := writeLayout(o, []platformImage{pi})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// newCABundle writes a bundle holding one new CA.
func newCABundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	testutil.NewCA(t, "image test CA").WriteCA(t, path)
	return path
}

func TestLayoutIsReproducibleAndTimesAreTheEpoch(t *testing.T) {
	dir := t.TempDir()
	epoch := time.Unix(1700000000, 0)
	ca := newCABundle(t)
	a := testImages(t, filepath.Join(dir, "a"), ca, epoch)
	b := testImages(t, filepath.Join(dir, "b"), ca, epoch)
	if a.Index != b.Index || a.Images["linux/amd64"] != b.Images["linux/amd64"] || a.SBOMs["linux/amd64"] != b.SBOMs["linux/amd64"] {
		t.Fatalf("two assemblies differ: %+v and %+v", a, b)
	}
	img := imageAt(t, filepath.Join(dir, "a"))
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Created.Time.Equal(epoch) || cfg.Config.Labels["org.opencontainers.image.created"] != "2023-11-14T22:13:20Z" {
		t.Errorf("created %v, label %q: want the epoch", cfg.Created.Time, cfg.Config.Labels["org.opencontainers.image.created"])
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(epoch) {
			t.Errorf("history %q created %v, want the epoch", h.CreatedBy, h.Created.Time)
		}
	}
	names := entries(t, img, func(h *tar.Header) {
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
	})
	want := []string{"data/", "etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "bin/", "bin/shoal"}
	if !slices.Equal(names, want) {
		t.Errorf("layers hold %q, want exactly %q (sorted per layer)", names, want)
	}
}

func TestDifferentCABundlesChangeOnlyTheBaseLayer(t *testing.T) {
	dir := t.TempDir()
	testImages(t, filepath.Join(dir, "a"), newCABundle(t), time.Time{})
	testImages(t, filepath.Join(dir, "b"), newCABundle(t), time.Time{})
	la, lb := layers(t, imageAt(t, filepath.Join(dir, "a"))), layers(t, imageAt(t, filepath.Join(dir, "b")))
	if la[0] == lb[0] {
		t.Error("base layers equal although the CA bundles differ")
	}
	if la[1] != lb[1] {
		t.Error("binary layers differ although the binary is the same")
	}
}

func TestImageRunsAsNonRootWithAStorageVolume(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image")
	testImages(t, out, newCABundle(t), time.Time{})
	cfg, err := imageAt(t, out).ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/bin/shoal"}) || c.WorkingDir != "/" {
		t.Errorf("user %q entrypoint %q workdir %q", c.User, c.Entrypoint, c.WorkingDir)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("volumes %v, want only /data", c.Volumes)
	}
	if !slices.Contains(c.Cmd, "--storage.path=/data") || cfg.Architecture != "amd64" || cfg.OS != "linux" {
		t.Errorf("cmd %q, platform %s/%s", c.Cmd, cfg.OS, cfg.Architecture)
	}
	if c.Labels["org.opencontainers.image.version"] != "v9.9.9" || c.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("labels %v", c.Labels)
	}
	owners := map[string][2]int{}
	entries(t, imageAt(t, out), func(h *tar.Header) { owners[h.Name] = [2]int{h.Uid, h.Gid} })
	if owners["data/"] != [2]int{UID, GID} || owners["bin/shoal"] != [2]int{0, 0} {
		t.Errorf("owners %v: want /data owned by 65532 and the binary by root", owners)
	}
}

func TestSBOMListsTheBinarysModulesAndIsAttachedToTheImage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image")
	res := testImages(t, out, newCABundle(t), time.Time{})
	data, err := os.ReadFile(filepath.Join(out+"-sbom", "linux-amd64.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Created     struct {
			Created string `json:"created"`
		} `json:"creationInfo"`
		Packages []struct {
			Name    string `json:"name"`
			Version string `json:"versionInfo"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.Name] = p.Version
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.Created.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("spdxVersion %q created %q", doc.SPDXVersion, doc.Created.Created)
	}
	// A replacement stands in for the module it replaces.
	if versions["github.com/google/go-containerregistry"] != "v0.22.1" || versions["example.com/fork"] != "v1.0.1" ||
		versions["shoal"] != "v9.9.9" || versions["stdlib"] != "go1.26.8" || len(versions) != 4 {
		t.Errorf("packages %v: want the binary, stdlib and its modules", versions)
	}

	// In the layout: a manifest of artifactType application/spdx+json whose
	// subject is the image, holding the same document.
	lp, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range im.Manifests {
		if d.ArtifactType != SBOMArtifactType {
			continue
		}
		found = d.Digest == res.SBOMs["linux/amd64"]
		art, err := top.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := art.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == nil || m.Subject.Digest != res.Images["linux/amd64"] || m.Config.MediaType != "application/vnd.oci.empty.v1+json" {
			t.Errorf("SBOM manifest %+v: want the image as subject and the empty config", m)
		}
		blob, err := art.LayerByDigest(m.Layers[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := blob.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != string(data) {
			t.Error("the SBOM in the layout differs from the file beside it")
		}
	}
	if !found {
		t.Errorf("no SBOM referrer %s in index.json: %+v", res.SBOMs["linux/amd64"], im.Manifests)
	}
}

func TestCABundleWithoutCertificatesIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(path, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(t.Context(), Options{ModuleDir: ".", Out: t.TempDir(), CABundle: path})
	if err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("Build with an empty CA bundle: %v, want a refusal naming it", err)
	}
}

// The chart's default image is what make image publishes.
func TestChartDefaultImageIsTheBuiltRepository(t *testing.T) {
	data, err := os.ReadFile("../../charts/shoal/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != Repository {
		t.Errorf("chart image.repository %q, want %q (what make image builds)", values.Image.Repository, Repository)
	}
}

// imageAt returns the one platform image of the layout's tagged index.
func imageAt(t *testing.T, dir string) v1.Image {
	t.Helper()
	img, err := PlatformImage(dir, v1.Platform{OS: "linux", Architecture: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func layers(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Hash
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// entries lists every layer's tar entries in order, calling f on each.
func entries(t *testing.T, img v1.Image, f func(*tar.Header)) []string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			f(h)
			names = append(names, h.Name)
		}
		rc.Close()
	}
	return names
}
