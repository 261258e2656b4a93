// Package units parses the sizes and durations users type on the command
// line and in policy files.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseSize parses a byte count: plain bytes ("1048576") or a number with
// a binary suffix K, M, G or T (also KiB, MiB, ... and KB, MB, ...: all
// powers of 1024), case-insensitive. Fractions are allowed with a suffix
// ("1.5G"). The result is at least 0 and fits in an int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	up := strings.ToUpper(t)
	up = strings.TrimSuffix(up, "IB")
	up = strings.TrimSuffix(up, "B")
	mult := int64(1)
	if up != "" {
		switch up[len(up)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			up = up[:len(up)-1]
		}
	}
	if up == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	if mult == 1 {
		n, err := strconv.ParseInt(up, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("size %q: want bytes or a number with K, M, G or T", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(up, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(up, "eEpPxX_") {
		return 0, fmt.Errorf("size %q: want bytes or a number with K, M, G or T", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}

// ParseDuration parses a Go duration ("500ms", "3s", "2m") that must not
// be negative.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a number with a unit, like 500ms, 3s or 2m", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q: negative", s)
	}
	return d, nil
}
