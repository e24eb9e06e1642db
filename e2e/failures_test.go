package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// A failing e2e test dumps its agents' logs when it ends, hundreds of
// lines that bury the assertion that failed. So every assertion goes
// through errorf, fatalf, fail or fatal, which also keep the message, and
// TestMain repeats the messages after the whole run, where the end of the
// output shows them.
var failures struct {
	mu   sync.Mutex
	msgs []string
}

func keepFailure(t testing.TB, msg string) {
	failures.mu.Lock()
	defer failures.mu.Unlock()
	failures.msgs = append(failures.msgs, t.Name()+": "+msg)
}

func errorf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	keepFailure(t, msg)
	t.Error(msg)
}

func fatalf(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	keepFailure(t, msg)
	t.Fatal(msg)
}

func fail(t testing.TB, args ...any) {
	t.Helper()
	msg := strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	keepFailure(t, msg)
	t.Error(msg)
}

func fatal(t testing.TB, args ...any) {
	t.Helper()
	msg := strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	keepFailure(t, msg)
	t.Fatal(msg)
}

// printFailures writes the kept messages, one line each (the first 400
// characters), to stdout.
func printFailures() {
	failures.mu.Lock()
	defer failures.mu.Unlock()
	if len(failures.msgs) == 0 {
		return
	}
	fmt.Fprintf(os.Stdout, "---- %d e2e assertion(s) failed; repeated here after the agents' logs ----\n", len(failures.msgs))
	for _, m := range failures.msgs {
		m = strings.ReplaceAll(m, "\n", " | ")
		if len(m) > 400 {
			m = m[:400] + "…"
		}
		fmt.Fprintln(os.Stdout, m)
	}
}

// run runs the tests and then repeats their failures.
func run(m *testing.M) int {
	code := m.Run()
	printFailures()
	return code
}
