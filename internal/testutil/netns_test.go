package testutil

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInOwnNetnsIsolatesTheTest: the test runs in another network
// namespace than the process that started it, its loopback carries
// NetnsIPv4, and a server there answers. It asks about loopback only,
// never about the machine's interfaces.
func TestInOwnNetnsIsolatesTheTest(t *testing.T) {
	if !InOwnNetns(t) {
		return
	}
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", os.Getppid()))
	if err != nil {
		t.Fatal(err)
	}
	if own == parent {
		t.Fatalf("the test runs in its parent's network namespace %s", own)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := lo.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, a := range addrs {
		ips = append(ips, a.(*net.IPNet).IP.String())
	}
	if !slices.Contains(ips, "127.0.0.1") || !slices.Contains(ips, NetnsIPv4) {
		t.Fatalf("lo has %v, want 127.0.0.1 and %s", ips, NetnsIPv4)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(NetnsIPv4, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v from a server on %s", b, err, l.Addr())
	}
}

// TestNoTestLooksUpTheMachinesAddresses keeps tests and benchmarks off the
// machine's own addresses: none but the namespace helper looks up the
// network interfaces, the usual way to find an address that is not loopback.
func TestNoTestLooksUpTheMachinesAddresses(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		testCode := strings.HasSuffix(path, "_test.go") || strings.HasPrefix(rel, "bench"+string(filepath.Separator))
		if !testCode || !strings.HasSuffix(path, ".go") || strings.HasPrefix(rel, filepath.Join("internal", "testutil", "netns")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, call := range []string{"net.InterfaceAddrs(", "net.Interfaces("} {
			if bytes.Contains(b, []byte(call)) {
				t.Errorf("%s calls %s: tests use loopback, or testutil.NetnsIPv4 inside testutil.InOwnNetns", rel, call)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
