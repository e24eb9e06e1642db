package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// UpdateSection replaces the text between the markers
// "<!-- BEGIN GENERATED: name -->" and "<!-- END GENERATED: name -->" in the
// Markdown file at path, leaving everything else as written by people. If
// the markers are missing, the section is appended under a heading.
func UpdateSection(path, name, heading, content string) error {
	begin := "<!-- BEGIN GENERATED: " + name + " -->"
	end := "<!-- END GENERATED: " + name + " -->"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	block := begin + "\n" + strings.TrimRight(content, "\n") + "\n" + end
	var out []byte
	i := bytes.Index(old, []byte(begin))
	j := bytes.Index(old, []byte(end))
	if i >= 0 && j > i {
		out = append(append(append([]byte{}, old[:i]...), block...), old[j+len(end):]...)
	} else {
		out = append(bytes.TrimRight(old, "\n"), []byte("\n\n## "+heading+"\n\n"+block+"\n")...)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MicroBench runs the Go micro-benchmarks of the given packages (those
// that exist under root) and returns the benchmark lines of the output:
//
//	go test -run '^$' -bench . -benchmem -benchtime <benchtime> <pkgs>
func MicroBench(ctx context.Context, root string, pkgs []string, benchtime string) (cmdline, output string, err error) {
	var have []string
	for _, p := range pkgs {
		matches, _ := filepath.Glob(filepath.Join(root, p, "*_test.go"))
		if len(matches) > 0 {
			have = append(have, p)
		}
	}
	if len(have) == 0 {
		return "", "", fmt.Errorf("none of %v has tests yet", pkgs)
	}
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", benchtime}, have...)
	cmdline = "go " + strings.Join(quoteArgs(args), " ")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	raw, err := cmd.CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(l, "Benchmark"), strings.HasPrefix(l, "goos:"), strings.HasPrefix(l, "goarch:"),
			strings.HasPrefix(l, "cpu:"), strings.HasPrefix(l, "pkg:"), strings.HasPrefix(l, "ok "),
			strings.HasPrefix(l, "FAIL"), strings.HasPrefix(l, "---"), strings.HasPrefix(l, "#"),
			strings.Contains(l, ".go:"), strings.HasPrefix(l, "panic"):
			keep = append(keep, l)
		}
	}
	return cmdline, strings.Join(keep, "\n"), err
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$ *") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
