// Package e2e holds multi-process end-to-end tests: they build the real shoal
// binary once and run it as separate processes against real HTTP targets and
// a real remote-write receiver (internal/receiver, a Prometheus TSDB) living
// in the test process.
//
// The suite is skipped with -short. Set SHOAL_E2E_RACE=1 to build the binary
// with the race detector. SHOAL_E2E_BIN names a binary to use instead of
// building one; TestMain sets it for the test binaries it runs again inside
// their own network namespace (testutil.InOwnNetns).
package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shoalBin is the path of the binary built by TestMain; empty with -short.
var shoalBin string

const binEnv = "SHOAL_E2E_BIN"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(run(m))
	}
	if bin := os.Getenv(binEnv); bin != "" {
		shoalBin = bin
		os.Exit(run(m))
	}
	dir, err := os.MkdirTemp("", "shoal-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bin, err := buildShoal(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building shoal:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	shoalBin = bin
	os.Setenv(binEnv, bin)
	code := run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command: from PATH, else from GOROOT.
func goTool() string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	return goBin
}

// moduleRoot is the directory of go.mod.
func moduleRoot() (string, error) {
	gomod, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod))), nil
}

// buildShoal runs `go build -o <dir>/shoal ./cmd/shoal` from the module root.
func buildShoal(dir string) (string, error) {
	goBin := goTool()
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "shoal")
	args := []string{"build", "-o", bin}
	env := os.Environ()
	if os.Getenv("SHOAL_E2E_RACE") == "1" {
		args = append(args, "-race")
		env = append(env, "CGO_ENABLED=1") // the race detector needs cgo
	}
	args = append(args, "./cmd/shoal")
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out.String())
	}
	return bin, nil
}

// needBinary skips the test under -short, where TestMain builds nothing.
func needBinary(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
}
