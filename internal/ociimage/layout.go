package ociimage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeLayout replaces o.Out with an OCI layout holding the index (tagged
// o.Tag) and, per platform, an SBOM referrer whose subject is that
// platform's image; it writes the SBOMs to o.SBOMDir too.
func writeLayout(o Options, images []platformImage) (*Result, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, pi := range images {
		adds = append(adds, mutate.IndexAddendum{
			Add:        pi.image,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: pi.platform.OS, Architecture: pi.platform.Architecture, Variant: pi.platform.Variant}},
		})
	}
	idx = mutate.AppendManifests(idx, adds...)
	idx = mutate.Annotations(idx, labels(o)).(v1.ImageIndex)

	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	lp, err := layout.Write(o.Out, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Tag,
	})); err != nil {
		return nil, err
	}
	res := &Result{Images: map[string]v1.Hash{}, SBOMs: map[string]v1.Hash{}}
	if res.Index, err = idx.Digest(); err != nil {
		return nil, err
	}
	for _, pi := range images {
		key := pi.platform.OS + "/" + pi.platform.Architecture
		if res.Images[key], err = pi.image.Digest(); err != nil {
			return nil, err
		}
		if res.SBOMs[key], err = attachSBOM(lp, pi); err != nil {
			return nil, fmt.Errorf("%s SBOM: %w", key, err)
		}
		if o.SBOMDir != "" {
			if err := writeSBOMFile(o.SBOMDir, pi); err != nil {
				return nil, err
			}
		}
	}
	if res.Size, err = blobsSize(o.Out); err != nil {
		return nil, err
	}
	return res, nil
}

func writeSBOMFile(dir string, pi platformImage) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%s.spdx.json", pi.platform.OS, pi.platform.Architecture)
	return os.WriteFile(filepath.Join(dir, name), pi.sbom, 0o644)
}

// attachSBOM writes the SBOM as an OCI 1.1 artifact (artifactType
// application/spdx+json, empty config, the document as its one blob) whose
// subject is the platform's image, and lists it in the layout's index.json,
// where referrer-aware tools (oras, regctl) find it.
func attachSBOM(lp layout.Path, pi platformImage) (v1.Hash, error) {
	subject, err := partial.Descriptor(pi.image)
	if err != nil {
		return v1.Hash{}, err
	}
	subject.Platform = nil
	art, err := newArtifact(SBOMArtifactType, pi.sbom, subject)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.WriteImage(art); err != nil {
		return v1.Hash{}, err
	}
	desc, err := partial.Descriptor(art)
	if err != nil {
		return v1.Hash{}, err
	}
	desc.ArtifactType = SBOMArtifactType
	return desc.Digest, lp.AppendDescriptor(*desc)
}

// emptyConfig is the OCI empty descriptor's content: an artifact has no
// image configuration.
var emptyConfig = []byte("{}")

// artifact is a manifest of one blob with the empty configuration, written
// by hand because an image built with mutate always carries an image
// configuration.
type artifact struct {
	manifest []byte
	blob     v1.Layer
}

func newArtifact(artifactType string, content []byte, subject *v1.Descriptor) (v1.Image, error) {
	blob := static.NewLayer(content, types.MediaType(artifactType))
	blobDesc, err := partial.Descriptor(blob)
	if err != nil {
		return nil, err
	}
	cfgHash, cfgSize, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        v1.Descriptor{MediaType: types.OCIEmptyJSON, Digest: cfgHash, Size: cfgSize},
		Layers:        []v1.Descriptor{*blobDesc},
		Subject:       subject,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, blob: blob})
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.blob.Digest(); err == nil && d == h {
		return a.blob, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// blobsSize adds up the layout's blobs: the bytes a registry stores for
// every platform (each pull fetches only its own platform's).
func blobsSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	return n, err
}

// PlatformImage reads the image for p from the index of the layout at dir
// (the one Build tagged; SBOM referrers are skipped).
func PlatformImage(dir string, p v1.Platform) (v1.Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.MediaType != types.OCIImageIndex {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		imgs, err := partial.FindImages(idx, func(desc v1.Descriptor) bool {
			return desc.Platform != nil && desc.Platform.Satisfies(p)
		})
		if err != nil {
			return nil, err
		}
		if len(imgs) == 1 {
			return imgs[0], nil
		}
	}
	return nil, fmt.Errorf("layout %s: no single image for %s/%s", dir, p.OS, p.Architecture)
}
