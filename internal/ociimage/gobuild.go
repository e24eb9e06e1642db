package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ldflags strips the symbol tables (debug/buildinfo still reads the module
// list) and stamps the version as make build does.
func ldflags(o Options) string {
	return strings.Join([]string{
		"-s", "-w",
		"-X github.com/prometheus/common/version.Version=" + o.Version,
		"-X github.com/prometheus/common/version.Revision=" + o.Revision,
		"-X github.com/prometheus/common/version.Branch=main",
	}, " ")
}

// goBuild compiles a static binary for p. Everything that could differ
// between two machines or two runs is fixed: no cgo, no paths (-trimpath),
// no VCS stamp, the baseline instruction set, and no GOFLAGS from the
// environment.
func goBuild(ctx context.Context, o Options, p v1.Platform, out string) error {
	cmd := exec.CommandContext(ctx, o.Go, "build",
		"-trimpath", "-buildvcs=false",
		"-tags", o.BuildTags,
		"-ldflags", ldflags(o),
		"-o", out, o.Package)
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOFLAGS=", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0")
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w\n%s", p.OS, p.Architecture, err, outBuf.String())
	}
	return nil
}
