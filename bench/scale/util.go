package scale

import (
	"bytes"
	"io"
	"time"

	"github.com/shoal-dev/shoal/bench/harness"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func procCPUOf(pid int) (time.Duration, error) { return harness.ProcCPU(pid) }

func machine() string { return harness.ThisMachine().String() }
