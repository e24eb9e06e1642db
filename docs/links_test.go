// Package docs holds the project's documentation; its test keeps the
// documents standing alone: every relative link resolves inside the
// repository and no document refers to files kept outside it.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// A Markdown link or image: [text](target) with a target without spaces.
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	// Anything that points at the project's requirements outside the repository.
	outsideRE = regexp.MustCompile(`(?i)SPEC\.md|shared folder|\.\./shared/`)
	fenceRE   = regexp.MustCompile("^\\s*(```|~~~)")
)

// TestDocumentsStandAlone checks every Markdown file of the repository.
func TestDocumentsStandAlone(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s", len(files), root)
	}
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		anchors[f] = headingAnchors(readFile(t, f))
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		text := readFile(t, f)
		if m := outsideRE.FindString(text); m != "" {
			t.Errorf("%s mentions %q: the repository's documents must not point outside it", rel, m)
		}
		for _, target := range links(text) {
			if problem := checkLink(root, f, target, anchors); problem != "" {
				t.Errorf("%s: link %q: %s", rel, target, problem)
			}
		}
	}
}

// checkLink returns why a link is broken, or "" when it resolves.
func checkLink(root, from, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "" // external pages are not checked here
	}
	path, anchor, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		dest = filepath.Clean(filepath.Join(filepath.Dir(from), path))
		if !strings.HasPrefix(dest, root+string(filepath.Separator)) {
			return "points outside the repository"
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if !anchors[dest][anchor] {
		return "no heading with anchor #" + anchor
	}
	return ""
}

func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// links lists the link targets outside fenced code blocks.
func links(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub derives from the headings:
// lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[slug(title)] = true
	}
	return out
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
