package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Tests send traffic only to loopback or to addresses inside a network
// namespace they made themselves. NetnsIPv4 is the one non-loopback address a
// test run by InOwnNetns has: on the namespace's loopback interface, so it
// reaches nothing outside, and from 198.18.0.0/15 (reserved for benchmarks,
// RFC 2544), so it is never the machine's own. It serves where loopback is
// refused, such as Kubernetes EndpointSlice addresses.
const NetnsIPv4 = "198.18.0.1"

// netnsEnv names, in a re-executed test binary, the test that runs inside
// the new network namespace.
const netnsEnv = "SHOAL_TEST_NETNS"

// InOwnNetns runs the calling top-level test in a new network namespace:
// the test binary runs again with only this test, as a child process in a
// namespace of its own (CLONE_NEWNET, which needs root or CAP_SYS_ADMIN).
// In the child it returns true once loopback is up with NetnsIPv4 on it,
// and the test goes on there, with every process it starts. In the parent
// it streams the child's output into the test's log, fails the test if the
// child failed and returns false: the caller must return.
//
//	if !testutil.InOwnNetns(t) {
//		return
//	}
//
// Without the privilege the test is skipped, except in CI, where it fails.
func InOwnNetns(t *testing.T) bool {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatal("InOwnNetns runs a whole test; call it from a top-level test")
	}
	if os.Getenv(netnsEnv) == t.Name() {
		if err := setUpNetns(); err != nil {
			t.Fatalf("setting up the network namespace: %v", err)
		}
		return true
	}
	runInNetns(t)
	return false
}

func runInNetns(t *testing.T) {
	t.Helper()
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		// The child times out first, so that its stacks are printed.
		args = append(args, "-test.timeout="+max(time.Until(d)-30*time.Second, time.Second).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			Unavailable(t, "a new network namespace needs root or CAP_SYS_ADMIN: "+err.Error())
		}
		t.Fatal(err)
	}
	var result string // the child's "--- PASS: Name" line, or SKIP or FAIL
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log("netns: " + line)
		if v, ok := strings.CutPrefix(line, "--- "); ok {
			if status, rest, _ := strings.Cut(v, ": "); strings.HasPrefix(rest, t.Name()+" (") {
				result = status
			}
		}
	}
	err = cmd.Wait()
	switch {
	case err != nil:
		t.Fatalf("%s in its own network namespace: %v (its output is above)", t.Name(), err)
	case result == "SKIP":
		t.Skip("skipped in its own network namespace (the reason is above)")
	case result != "PASS":
		t.Fatalf("%s did not run in its own network namespace (its output is above)", t.Name())
	}
}

// setUpNetns brings the new namespace's loopback interface up (it starts
// down) and adds NetnsIPv4 to it as the alias lo:1.
func setUpNetns() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := ifUp(fd, "lo"); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq("lo:1")
	if err != nil {
		return err
	}
	if err := ifr.SetInet4Addr(net.ParseIP(NetnsIPv4).To4()); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("adding %s to lo: %w", NetnsIPv4, err)
	}
	return ifUp(fd, "lo:1")
}

func ifUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}
