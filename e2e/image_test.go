package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/shoal-dev/shoal/internal/ociimage"
	"github.com/shoal-dev/shoal/internal/testutil"
)

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

// TestImage builds the linux/amd64 image twice as make image does (the
// arm64 one is left to make image: cross-compiling every package cold
// costs minutes), checks that both builds have the same digests and what
// the configuration and SBOM say, then runs the image the way a container
// runtime would: unpacked from the layout into a root of its own, read-only
// but for the storage volume, as uid 65532. The agent scrapes a loopback
// target and remote-writes over HTTPS to a receiver whose certificate
// chains to a CA that only the image's CA bundle holds.
func TestImage(t *testing.T) {
	needBinary(t)
	root, err := moduleRoot()
	if err != nil {
		fatal(t, err)
	}
	ca := testutil.NewCA(t, "shoal image e2e CA")
	o := ociimage.Options{
		ModuleDir: root,
		Platforms: []v1.Platform{amd64},
		CABundle:  caBundleWith(t, ca.PEM),
		Version:   "e2e",
		Revision:  "test",
		Epoch:     time.Unix(1700000000, 0),
		Go:        goTool(),
	}
	dir := t.TempDir()
	build := func(name string) (*ociimage.Result, string) {
		o.Out, o.SBOMDir = filepath.Join(dir, name), filepath.Join(dir, name+"-sbom")
		start := time.Now()
		res, err := ociimage.Build(t.Context(), o)
		if err != nil {
			fatal(t, err)
		}
		t.Logf("build %s: %v, index %s, %d bytes of blobs", name, time.Since(start).Round(time.Millisecond), res.Index, res.Size)
		return res, o.Out
	}
	first, layoutDir := build("first")
	second, _ := build("second")
	img, err := ociimage.PlatformImage(layoutDir, amd64)
	if err != nil {
		fatal(t, err)
	}

	t.Run("SameDigestTwice", func(t *testing.T) {
		if first.Index != second.Index || first.Images["linux/amd64"] != second.Images["linux/amd64"] || first.SBOMs["linux/amd64"] != second.SBOMs["linux/amd64"] {
			errorf(t, "two builds differ:\n first  %+v\n second %+v", first, second)
		}
	})
	t.Run("Config", func(t *testing.T) { checkImageConfig(t, img) })
	t.Run("SBOMListsTheLinkedModules", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(dir, "first-sbom", "linux-amd64.spdx.json"))
		if err != nil {
			fatal(t, err)
		}
		for _, want := range []string{`"name": "github.com/prometheus/prometheus"`, `"versionInfo": "v0.316.0"`, `"name": "github.com/hashicorp/memberlist"`, `"SPDX-2.3"`} {
			if !bytes.Contains(data, []byte(want)) {
				errorf(t, "SBOM lacks %s", want)
			}
		}
	})
	t.Run("RunsFromItsOwnReadOnlyRoot", func(t *testing.T) { runImage(t, img, ca) })
}

// caBundleWith writes the machine's CA bundle (when it has one) followed by
// extra, as the image's bundle.
func caBundleWith(t *testing.T, extra []byte) string {
	t.Helper()
	bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fatal(t, err)
	}
	path := filepath.Join(t.TempDir(), "ca-certificates.crt")
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	if err := os.WriteFile(path, append(bundle, extra...), 0o644); err != nil {
		fatal(t, err)
	}
	return path
}

func checkImageConfig(t *testing.T, img v1.Image) {
	cfg, err := img.ConfigFile()
	if err != nil {
		fatal(t, err)
	}
	c := cfg.Config
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/bin/shoal"}) {
		errorf(t, "user %q, entrypoint %q: want 65532:65532 and /bin/shoal", c.User, c.Entrypoint)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 || !slices.Contains(c.Cmd, "--storage.path=/data") {
		errorf(t, "volumes %v, cmd %q: want the one volume /data as the storage path", c.Volumes, c.Cmd)
	}
	if c.Labels["org.opencontainers.image.version"] != "e2e" || c.Labels["org.opencontainers.image.revision"] != "test" ||
		c.Labels["org.opencontainers.image.created"] != "2023-11-14T22:13:20Z" {
		errorf(t, "labels %v", c.Labels)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		errorf(t, "platform %s/%s", cfg.OS, cfg.Architecture)
	}
}

// requireRuntime returns the host tools that play the container runtime,
// or skips the test (fails it in CI) when they or root are missing.
func requireRuntime(t *testing.T) map[string]string {
	t.Helper()
	tools := map[string]string{}
	var missing []string
	for _, name := range []string{"unshare", "chroot", "sh"} {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		tools[name] = p
	}
	switch {
	case os.Geteuid() != 0:
		missing = append(missing, "root (mount namespace, chroot and uid 65532)")
	case len(missing) == 0:
		return tools
	}
	testutil.Unavailable(t, "running the image needs "+strings.Join(missing, ", "))
	return nil
}

// runtimeScript does what a container runtime does before it starts the
// entrypoint, in the new mount namespace unshare made: mount points,
// /proc, a minimal /dev, the configuration (read-only) and the storage
// volume, then the root made read-only, then chroot as the image's user
// and group, with the image's environment.
const runtimeScript = `set -eu
root=$1 vol=$2 conf=$3 user=$4 chroot=$5; shift 5
image_path=$PATH PATH=/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p "$root/proc" "$root/dev" "$root/etc/shoal"
mount --bind "$root" "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs "$root/dev"
for d in null zero random urandom; do : > "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"; done
mount --bind "$conf" "$root/etc/shoal"
mount -o remount,bind,ro "$root/etc/shoal"
mount --bind "$vol" "$root/data"
mount -o remount,bind,ro "$root"
PATH=$image_path
exec "$chroot" --userspec="$user" --groups="${user#*:}" "$root" "$@"
`

func runImage(t *testing.T, img v1.Image, ca *testutil.CA) {
	tools := requireRuntime(t)
	cfg, err := img.ConfigFile()
	if err != nil {
		fatal(t, err)
	}
	dir := t.TempDir()
	rootfs, vol, conf := filepath.Join(dir, "rootfs"), filepath.Join(dir, "volume"), filepath.Join(dir, "config")
	unpack(t, img, rootfs)
	// An empty volume, owned as the image's /data is (a runtime copies
	// the image's ownership into a new volume; Kubernetes sets fsGroup).
	for _, d := range []string{vol, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			fatal(t, err)
		}
	}
	if err := os.Chown(vol, ociimage.UID, ociimage.GID); err != nil {
		fatal(t, err)
	}

	recv := startReceiverTLS(t, serverTLS(t, ca))
	tg := startTargets(t, 1, 0)[0]
	// No tls_config: the agent can trust the receiver only through the
	// image's CA bundle.
	writeConfig(t, conf, configOpts{job: "image", targets: []string{tg.addr}, remoteWriteURL: recv.writeURL()})
	webAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))

	args := []string{"--mount", "--pid", "--fork", "--kill-child=SIGKILL", "--propagation", "private",
		tools["sh"], "-c", runtimeScript, "runtime", rootfs, vol, conf, cfg.Config.User, tools["chroot"]}
	args = append(args, cfg.Config.Entrypoint...)
	args = append(args, cfg.Config.Cmd...)
	args = append(args, "--web.listen-address="+webAddr)
	var logBuf testutil.LogBuffer
	cmd := exec.Command(tools["unshare"], args...)
	cmd.Env = cfg.Config.Env // what the image says, nothing from the test's environment
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		fatal(t, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // its child gets SIGKILL (--kill-child)
		<-done
		if t.Failed() {
			t.Logf("---- the container's output ----\n%s", logBuf.String())
		}
	})
	exited := func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("the container exited: %v", err)
		default:
			return nil
		}
	}

	eventually(t, startTimeout, "agent ready", func() error {
		if err := exited(); err != nil {
			fatal(t, err)
		}
		resp, err := httpClient.Get("http://" + webAddr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
	pid := containerPID(t, cmd.Process.Pid)
	checkContainerProcess(t, pid, rootfs)

	// Scraped over loopback and written over HTTPS: the counter's samples
	// arrive, and the receiver refused nothing.
	eventually(t, convergeTimeout, "samples at the HTTPS receiver", func() error {
		if err := exited(); err != nil {
			fatal(t, err)
		}
		vals, err := recv.counterValues()
		if err != nil {
			return err
		}
		if n := len(vals[tg.addr]); n < 3 {
			return fmt.Errorf("%d samples of %s from %s so far", n, counterMetric, tg.addr)
		}
		return nil
	})
	checkVolumeWritten(t, vol)

	// SIGTERM to the entrypoint (PID 1 in its namespace): a clean exit.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		fatal(t, err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			fatalf(t, "after SIGTERM the container exited with %v, want status 0", err)
		}
	case <-time.After(stopTimeout):
		fatalf(t, "the container did not exit within %v of SIGTERM", stopTimeout)
	}
}

// serverTLS serves a certificate for 127.0.0.1 issued by ca.
func serverTLS(t *testing.T, ca *testutil.CA) *tls.Config {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, "receiver", certFile, keyFile, testutil.LeafOptions{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		fatal(t, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// unpack writes the image's filesystem (its layers flattened by
// go-containerregistry) into dir with the owners and modes it records.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			fatal(t, err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeEntry(target, tr)
		default:
			fatalf(t, "%s: unexpected entry type %q in the image", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Lchown(target, h.Uid, h.Gid)
		}
		if err == nil {
			err = os.Chmod(target, h.FileInfo().Mode().Perm())
		}
		if err != nil {
			fatal(t, err)
		}
	}
}

func writeEntry(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// containerPID is the entrypoint's process: unshare's one child.
func containerPID(t *testing.T, unsharePID int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unsharePID, unsharePID))
	if err != nil {
		fatal(t, err)
	}
	fields := strings.Fields(string(data))
	if len(fields) != 1 {
		fatalf(t, "unshare has children %q, want one", fields)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		fatal(t, err)
	}
	return pid
}

// checkContainerProcess checks that the running agent is what the image
// says it is, set up as a runtime would: uid and gid 65532, rooted in the
// unpacked image, / read-only and /data writable.
func checkContainerProcess(t *testing.T, pid int, rootfs string) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		fatal(t, err)
	}
	if want := filepath.Join(rootfs, "bin/shoal"); exe != want {
		errorf(t, "the container runs %s, want %s", exe, want)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fatal(t, err)
	}
	ids := map[string][]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			ids[k] = strings.Fields(v)
		}
	}
	for key, want := range map[string][]string{"Uid": {"65532", "65532", "65532", "65532"}, "Gid": {"65532", "65532", "65532", "65532"}, "Groups": {"65532"}} {
		if !slices.Equal(ids[key], want) {
			errorf(t, "the agent's %s are %q, want %q", key, ids[key], want)
		}
	}
	mounts := map[string]string{} // mount point (in the container) -> options
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		fatal(t, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 5 {
			mounts[fields[4]] = fields[5]
		}
	}
	if opts := strings.Split(mounts["/"], ","); !slices.Contains(opts, "ro") {
		errorf(t, "/ mounted %q in the container, want read-only", mounts["/"])
	}
	if opts := strings.Split(mounts["/data"], ","); !slices.Contains(opts, "rw") {
		errorf(t, "/data mounted %q in the container, want read-write", mounts["/data"])
	}
}

// checkVolumeWritten checks that the agent keeps its WAL in the volume,
// as the image's user.
func checkVolumeWritten(t *testing.T, vol string) {
	t.Helper()
	var files int
	err := filepath.Walk(vol, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == vol {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Uid != ociimage.UID {
			errorf(t, "%s owned by uid %d, want %d", path, st.Uid, ociimage.UID)
		}
		if info.Mode().IsRegular() {
			files++
		}
		return nil
	})
	if err != nil {
		fatal(t, err)
	}
	if files == 0 {
		fail(t, "the agent wrote nothing into the storage volume")
	}
}
