package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// ProfileTop is how many functions a profile summary lists.
const ProfileTop = 8

// Profiles are the profiles of one agent process over a measurement window.
type Profiles struct {
	// CPU is the CPU profile over the window (sample type "cpu").
	CPU ProfileSummary
	// Heap is the heap profile at the window's end, after a GC (sample
	// type "inuse_space").
	Heap ProfileSummary
	// CPUPath and HeapPath are the raw profiles, for go tool pprof.
	CPUPath, HeapPath string
	// Err says which profile could not be taken, if any.
	Err string
}

// ProfileSummary is the top of one profile.
type ProfileSummary struct {
	SampleType, Unit string
	// Total is the sum of the sample type over every sample.
	Total int64
	// Duration is the profile's duration (CPU profiles).
	Duration time.Duration
	// Flat lists the functions with the most value in themselves; Cum the
	// functions with the most value in themselves and their callees. Both
	// are sorted by value, largest first, ties by name.
	Flat, Cum []ProfileEntry
}

// ProfileEntry is one function's share of a profile.
type ProfileEntry struct {
	Func  string
	Value int64
}

// SummarizeProfile adds up the sample type named sampleType per function
// and returns the top n by flat and by cumulative value. Flat value goes to
// the innermost function of a sample's first location (pprof lists inlined
// functions innermost first); cumulative value goes once to every function
// on the sample's stack, however often it recurses.
func SummarizeProfile(p *profile.Profile, sampleType string, n int) (ProfileSummary, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		var have []string
		for _, st := range p.SampleType {
			have = append(have, st.Type)
		}
		return ProfileSummary{}, fmt.Errorf("profile has no sample type %q (has %v)", sampleType, have)
	}
	s := ProfileSummary{SampleType: sampleType, Unit: p.SampleType[idx].Unit, Duration: time.Duration(p.DurationNanos)}
	flat, cum := map[string]int64{}, map[string]int64{}
	for _, smp := range p.Sample {
		v := smp.Value[idx]
		if v == 0 {
			continue
		}
		s.Total += v
		seen := map[string]bool{}
		for li, loc := range smp.Location {
			for ln, line := range loc.Line {
				name := "?"
				if line.Function != nil {
					name = line.Function.Name
				}
				if li == 0 && ln == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
			if li == 0 && len(loc.Line) == 0 {
				name := fmt.Sprintf("0x%x", loc.Address)
				flat[name] += v
				cum[name] += v
			}
		}
	}
	s.Flat, s.Cum = top(flat, n), top(cum, n)
	return s, nil
}

func top(m map[string]int64, n int) []ProfileEntry {
	out := make([]ProfileEntry, 0, len(m))
	for f, v := range m {
		out = append(out, ProfileEntry{Func: f, Value: v})
	}
	slices.SortFunc(out, func(a, b ProfileEntry) int {
		if a.Value != b.Value {
			if a.Value > b.Value {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Func, b.Func)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

type profileResult struct {
	p    *profile.Profile
	path string
	err  error
}

// fetchProfile fetches a pprof profile from a process, keeps it at out and
// parses it.
func fetchProfile(ctx context.Context, p *process, path, out string, timeout time.Duration) (*profile.Profile, string, error) {
	body, err := httpGet(ctx, p, path, timeout)
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(out, body, 0o644); err != nil {
		return nil, "", err
	}
	prof, err := profile.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, out, fmt.Errorf("%s %s: %w", p.name, path, err)
	}
	return prof, out, nil
}

// collectProfiles waits for the CPU profile that was started with the
// window (it ends with it), then takes the heap profile, so that the
// profiler's own buffers are not in the heap.
func collectProfiles(ctx context.Context, p *process, dir string, cpu <-chan profileResult) *Profiles {
	out := &Profiles{}
	var errs []string
	c := <-cpu
	err := c.err
	if err == nil {
		out.CPUPath = c.path
		out.CPU, err = SummarizeProfile(c.p, "cpu", ProfileTop)
	}
	if err != nil {
		errs = append(errs, "cpu: "+err.Error())
	}
	hp, path, err := fetchProfile(ctx, p, "/debug/pprof/heap?gc=1", filepath.Join(dir, "heap.pprof"), time.Minute)
	if err == nil {
		out.HeapPath = path
		out.Heap, err = SummarizeProfile(hp, "inuse_space", ProfileTop)
	}
	if err != nil {
		errs = append(errs, "heap: "+err.Error())
	}
	out.Err = strings.Join(errs, "; ")
	return out
}
