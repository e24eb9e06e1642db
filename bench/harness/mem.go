package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-dev/shoal/internal/promtext"
)

// MemBreakdown says where an agent's resident memory goes: the kernel's
// split of RSS into anonymous and file-backed pages, and the Go runtime's
// own accounting from the agent's /metrics (every agent under test is a Go
// program exposing the go_memstats_* gauges). Values are summed over the
// agent's processes.
type MemBreakdown struct {
	// OK is false when nothing could be read; Err then says why.
	OK  bool
	Err string

	RSS     int64 // VmRSS
	RSSAnon int64 // RssAnon: heap, stacks, runtime metadata
	RSSFile int64 // RssFile: the binary's and other mapped files' pages

	HeapInuse          int64 // go_memstats_heap_inuse_bytes
	HeapIdleUnreleased int64 // go_memstats_heap_idle_bytes − go_memstats_heap_released_bytes: free heap kept resident
	Stacks             int64 // go_memstats_stack_inuse_bytes
	GoSys              int64 // go_memstats_sys_bytes: all the runtime obtained from the OS
	Goroutines         int   // go_goroutines
}

// OtherAnon is the anonymous resident memory the heap and stack figures do
// not explain: runtime metadata (spans, GC bitmaps, per-P caches) and the
// error between the two accountings.
func (m MemBreakdown) OtherAnon() int64 {
	return m.RSSAnon - m.HeapInuse - m.HeapIdleUnreleased - m.Stacks
}

func (m MemBreakdown) add(o MemBreakdown) MemBreakdown {
	m.RSS += o.RSS
	m.RSSAnon += o.RSSAnon
	m.RSSFile += o.RSSFile
	m.HeapInuse += o.HeapInuse
	m.HeapIdleUnreleased += o.HeapIdleUnreleased
	m.Stacks += o.Stacks
	m.GoSys += o.GoSys
	m.Goroutines += o.Goroutines
	return m
}

// procStatus returns the "kB" fields of /proc/<pid>/status in bytes.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		out[name] = v << 10
	}
	return out, nil
}

// memFromMetrics reads the Go runtime's gauges from a parsed /metrics page.
func memFromMetrics(mfs map[string]*dto.MetricFamily) (MemBreakdown, error) {
	var m MemBreakdown
	get := func(name string) float64 {
		v, err := promtext.Value(mfs, name, nil)
		if err != nil && m.Err == "" {
			m.Err = err.Error()
		}
		return v
	}
	m.HeapInuse = int64(get("go_memstats_heap_inuse_bytes"))
	m.HeapIdleUnreleased = int64(get("go_memstats_heap_idle_bytes") - get("go_memstats_heap_released_bytes"))
	m.Stacks = int64(get("go_memstats_stack_inuse_bytes"))
	m.GoSys = int64(get("go_memstats_sys_bytes"))
	m.Goroutines = int(get("go_goroutines"))
	if m.Err != "" {
		return m, fmt.Errorf("%s", m.Err)
	}
	return m, nil
}

// memOf reads one process's breakdown.
func memOf(ctx context.Context, p *process) (MemBreakdown, error) {
	st, err := procStatus(p.pid())
	if err != nil {
		return MemBreakdown{}, err
	}
	body, err := httpGet(ctx, p, "/metrics", 15*time.Second)
	if err != nil {
		return MemBreakdown{}, err
	}
	mfs, err := promtext.Parse(bytes.NewReader(body))
	if err != nil {
		return MemBreakdown{}, fmt.Errorf("%s /metrics: %w", p.name, err)
	}
	m, err := memFromMetrics(mfs)
	if err != nil {
		return MemBreakdown{}, fmt.Errorf("%s /metrics: %w", p.name, err)
	}
	m.RSS, m.RSSAnon, m.RSSFile = st["VmRSS"], st["RssAnon"], st["RssFile"]
	return m, nil
}

// readMem sums the breakdown over an agent's processes.
func readMem(ctx context.Context, procs []*process) MemBreakdown {
	var sum MemBreakdown
	for _, p := range procs {
		m, err := memOf(ctx, p)
		if err != nil {
			return MemBreakdown{Err: err.Error()}
		}
		sum = sum.add(m)
	}
	sum.OK = len(procs) > 0
	return sum
}

// httpGet fetches path from a process's web port.
func httpGet(ctx context.Context, p *process, path string, timeout time.Duration) ([]byte, error) {
	if p.web == 0 {
		return nil, fmt.Errorf("%s: no web port", p.name)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.web, path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", p.name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", p.name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", p.name, path, resp.Status, oneLine(string(body)))
	}
	return body, nil
}
