package ociimage

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	"github.com/spdx/tools-golang/spdx/v2/v2_3"
)

// readBuildInfo reads the module list and build settings that the Go
// linker embeds in the binary.
func readBuildInfo(binary []byte) (*debug.BuildInfo, error) {
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("reading the binary's build information: %w", err)
	}
	return bi, nil
}

// SBOM describes a Go binary in SPDX 2.3 JSON: the binary itself (with its
// SHA-256 and build settings), the Go standard library and every module
// linked into it, as the binary's own build information bi lists them
// (debug/buildinfo, so the list is what was compiled, not what go.mod
// allows). Every time in it is epoch, so it is as reproducible as the image.
func SBOM(binary []byte, bi *debug.BuildInfo, p v1.Platform, version string, epoch time.Time) ([]byte, error) {
	sum := sha256.Sum256(binary)
	binID := common.ElementID("shoal-binary")
	root := &v2_3.Package{
		PackageName:             "shoal",
		PackageSPDXIdentifier:   binID,
		PackageVersion:          version,
		PackageFileName:         BinaryPath,
		PackageDownloadLocation: "NOASSERTION",
		PackageChecksums:        []common.Checksum{{Algorithm: common.SHA256, Value: hex.EncodeToString(sum[:])}},
		PrimaryPackagePurpose:   "APPLICATION",
		PackageComment:          fmt.Sprintf("%s/%s binary of %s; build settings: %s", p.OS, p.Architecture, bi.Main.Path, settings(bi)),
		PackageExternalReferences: []*v2_3.PackageExternalReference{
			purl(bi.Main.Path, version),
		},
	}
	doc := &v2_3.Document{
		SPDXVersion:       v2_3.Version,
		DataLicense:       v2_3.DataLicense,
		SPDXIdentifier:    "DOCUMENT",
		DocumentName:      fmt.Sprintf("shoal-%s-%s-%s", version, p.OS, p.Architecture),
		DocumentNamespace: fmt.Sprintf("https://github.com/shoal-dev/shoal/spdx/%s-%s-%s-%s", version, p.OS, p.Architecture, hex.EncodeToString(sum[:8])),
		CreationInfo: &v2_3.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Tool", Creator: "shoal-image"}},
			Created:  epoch.UTC().Format(time.RFC3339),
		},
		Packages: []*v2_3.Package{root},
		Relationships: []*v2_3.Relationship{{
			RefA:         common.MakeDocElementID("", "DOCUMENT"),
			RefB:         common.MakeDocElementID("", string(binID)),
			Relationship: common.TypeRelationshipDescribe,
		}},
	}
	mods := append([]module{{path: "stdlib", version: bi.GoVersion}}, modules(bi)...)
	for i, m := range mods {
		id := common.ElementID(fmt.Sprintf("gomod-%d-%s", i, idChars.ReplaceAllString(m.path, "-")))
		doc.Packages = append(doc.Packages, &v2_3.Package{
			PackageName:               m.path,
			PackageSPDXIdentifier:     id,
			PackageVersion:            m.version,
			PackageDownloadLocation:   "NOASSERTION",
			PackageComment:            m.comment,
			PackageExternalReferences: []*v2_3.PackageExternalReference{purl(m.path, m.version)},
		})
		doc.Relationships = append(doc.Relationships, &v2_3.Relationship{
			RefA:         common.MakeDocElementID("", string(binID)),
			RefB:         common.MakeDocElementID("", string(id)),
			Relationship: common.TypeRelationshipContains,
		})
	}
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf, spdxjson.Indent("  ")); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// idChars are the characters an SPDX identifier may not hold.
var idChars = regexp.MustCompile(`[^A-Za-z0-9.-]`)

// module is one linked module as it was built: a replacement stands in
// for what it replaces.
type module struct {
	path, version, comment string
}

func modules(bi *debug.BuildInfo) []module {
	var out []module
	for _, d := range bi.Deps {
		m := module{path: d.Path, version: d.Version, comment: "go.sum " + d.Sum}
		if r := d.Replace; r != nil {
			m = module{path: r.Path, version: r.Version, comment: fmt.Sprintf("replaces %s %s; go.sum %s", d.Path, d.Version, r.Sum)}
		}
		out = append(out, m)
	}
	return out
}

// settings renders the build settings that shape the binary.
func settings(bi *debug.BuildInfo) string {
	var parts []string
	for _, s := range bi.Settings {
		parts = append(parts, s.Key+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// purl is the package URL scanners match vulnerabilities by.
func purl(path, version string) *v2_3.PackageExternalReference {
	return &v2_3.PackageExternalReference{
		Category: common.CategoryPackageManager,
		RefType:  common.TypePackageManagerPURL,
		Locator:  "pkg:golang/" + path + "@" + version,
	}
}
