package testutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size (mount(8) syntax, e.g. "2m") on dir,
// creating it, until the test ends: a small file system that really fills
// up. Not being root, it tries sudo without a password. Without either it
// skips, except in CI (CI set), where it fails.
func MountTmpfs(t testing.TB, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var sudo []string
	if os.Geteuid() != 0 {
		sudo = []string{"sudo", "-n"}
	}
	run := func(args ...string) ([]byte, error) {
		args = append(sudo, args...)
		return exec.Command(args[0], args[1:]...).CombinedOutput()
	}
	// mode=1777: writable by this test when the mount needed sudo.
	if out, err := run("mount", "-t", "tmpfs", "-o", "size="+size+",mode=1777", "tmpfs", dir); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs (this test needs root or password-less sudo): %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run("umount", dir); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// FillDisk writes a file into dir until its file system is full and
// returns a function that removes it again.
func FillDisk(t testing.TB, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	f.Close()
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// FillInodes creates empty files in dir until its file system has no inode
// left (no new file can be made although there is space) and returns a
// function that removes them again.
func FillInodes(t testing.TB, dir string) (free func()) {
	t.Helper()
	fill := filepath.Join(dir, "inodes")
	if err := os.Mkdir(fill, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(fill, strconv.Itoa(i)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("using up the inodes: %v", err)
			}
			break
		}
		f.Close()
	}
	return func() {
		if err := os.RemoveAll(fill); err != nil {
			t.Fatal(err)
		}
	}
}
