package main

import "testing"

func TestPlatformsFlag(t *testing.T) {
	ps, err := parsePlatforms("linux/amd64, linux/arm64")
	if err != nil || len(ps) != 2 || ps[1].Architecture != "arm64" || ps[1].OS != "linux" {
		t.Fatalf("parsePlatforms: %v, %v", ps, err)
	}
	for _, bad := range []string{"", "linux", "linux/amd64,"} {
		if _, err := parsePlatforms(bad); err == nil {
			t.Errorf("parsePlatforms(%q) accepted", bad)
		}
	}
}
