package units

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var sizeCases = []struct {
	in   string
	want int64
	ok   bool
}{
	{"0", 0, true},
	{"1048576", 1 << 20, true},
	{"128M", 128 << 20, true},
	{"128m", 128 << 20, true},
	{"128MiB", 128 << 20, true},
	{"128MB", 128 << 20, true},
	{"1.5G", 3 << 29, true},
	{"64K", 64 << 10, true},
	{"2T", 2 << 40, true},
	{"", 0, false},
	{"M", 0, false},
	{"-1", 0, false},
	{"-1M", 0, false},
	{"1e3M", 0, false},
	{"0x10", 0, false},
	{"12Q", 0, false},
	{"9999999999T", 0, false},
	{"NaNM", 0, false},
}

func TestParseSize(t *testing.T) {
	for _, c := range sizeCases {
		got, err := ParseSize(c.in)
		if !c.ok {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
}

func TestParseDuration(t *testing.T) {
	d, err := ParseDuration("500ms")
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, d)
	for _, bad := range []string{"", "3", "-1s", "soon"} {
		_, err := ParseDuration(bad)
		assert.Error(t, err, bad)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, c := range sizeCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1s", "500ms", "-1s", "2m30s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
	})
}
