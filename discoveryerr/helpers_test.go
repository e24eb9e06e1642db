package discoveryerr

import (
	"errors"
	"fmt"
)

var errFake = errors.New("not allowed by the test")

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
