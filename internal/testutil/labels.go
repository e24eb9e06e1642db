package testutil

import (
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
)

// SameLabelSet reports whether a and b are one label set in memory, not
// two equal copies: the default labels implementation (a string) and
// slicelabels keep their data pointer in the first word.
func SameLabelSet(a, b labels.Labels) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}
