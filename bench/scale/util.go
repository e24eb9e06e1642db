package scale

import (
	"time"

	"bytes"
	"github.com/shoal-dev/shoal/bench/harness"
	"io"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func procCPUOf(pid int) (time.Duration, error) { return harness.ProcCPU(pid) }

func machine() string { return harness.ThisMachine().String() }
