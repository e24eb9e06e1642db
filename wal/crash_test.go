package wal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/storage"
)

const crashChildEnv = "SHOAL_WAL_CRASH_CHILD_DIR"

// A process killed with SIGKILL while appending loses no committed sample:
// a child process commits batches and reports each commit; the parent kills
// it mid-stream, reopens the WAL and finds every reported batch.
func TestSIGKILLLosesNoCommittedSample(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLLosesNoCommittedSample$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var base int64
	last := -1
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "base" {
			base, _ = strconv.ParseInt(f[1], 10, 64)
		}
		if len(f) == 2 && f[0] == "committed" {
			last, _ = strconv.Atoi(f[1])
			if last >= 200 {
				break
			}
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if last < 200 || base == 0 {
		t.Fatalf("child reported %d commits (base %d) before the kill", last, base)
	}

	w := openTest(t, dir, Options{}, nil)
	if w.ActiveSeries() != 100 {
		t.Fatalf("active series after crash = %d, want 100", w.ActiveSeries())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := readRecords(t, dir)
	perTs := map[int64]int{}
	for _, s := range c.samples {
		perTs[s.T]++
	}
	for i := 0; i <= last; i++ {
		if n := perTs[base+int64(i)*1000]; n != 100 {
			t.Fatalf("commit %d (reported done before the kill) has %d of 100 samples in the WAL", i, n)
		}
	}
}

func crashChild(dir string) {
	s, err := Open(dir, Options{}, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	series := makeSeries(100, "crash")
	refs := make([]storage.SeriesRef, len(series))
	base := time.Now().UnixMilli()
	fmt.Printf("base %d\n", base)
	for i := 0; ; i++ {
		app := s.AppenderV2(context.Background())
		for j, ls := range series {
			ref, err := app.Append(refs[j], ls, 0, base+int64(i)*1000, float64(i), nil, nil, storage.AOptions{})
			if err != nil {
				fmt.Fprintln(os.Stderr, "child append:", err)
				os.Exit(2)
			}
			refs[j] = ref
		}
		if err := app.Commit(); err != nil {
			fmt.Fprintln(os.Stderr, "child commit:", err)
			os.Exit(2)
		}
		fmt.Printf("committed %d\n", i)
	}
}
