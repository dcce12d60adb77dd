package nativelib

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func TestElements(t *testing.T) {
	for _, c := range []struct {
		shape []int64
		n     int64
		err   string
	}{
		{nil, 1, ""},
		{[]int64{2, 3, 4}, 24, ""},
		{[]int64{0, 1 << 62}, 0, ""},
		{[]int64{2, -1}, 0, "dimension -1 is negative"},
		{[]int64{1 << 40, 1 << 9}, 0, "too many elements"},
		{[]int64{1 << 62, 1 << 62}, 0, "too many elements"}, // overflows 64 bits
	} {
		n, err := Elements(c.shape)
		if c.err == "" && (err != nil || n != c.n) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Elements(%v) = %d, %v; want %d, %q", c.shape, n, err, c.n, c.err)
		}
	}
}

func TestCheckShapeAndBytes(t *testing.T) {
	if n, err := CheckShape("x", []int64{4, 3}, []int64{-1, 3}); err != nil || n != 12 {
		t.Errorf("a dynamic batch: %d, %v", n, err)
	}
	if _, err := CheckShape("x", []int64{4, 3}, nil); err != nil {
		t.Errorf("any rank: %v", err)
	}
	for _, c := range []struct {
		shape, want []int64
		msg         string
	}{
		{[]int64{4}, []int64{-1, 3}, `input "x" has shape [4]; the model takes 2 dimensions ([-1 3])`},
		{[]int64{4, 2}, []int64{-1, 3}, `input "x" has shape [4 2]; the model takes [-1 3] (-1: any)`},
		{[]int64{4, -2}, nil, `input "x": dimension -2 is negative`},
	} {
		if _, err := CheckShape("x", c.shape, c.want); err == nil || err.Error() != c.msg {
			t.Errorf("CheckShape(%v, %v) = %v; want %q", c.shape, c.want, err, c.msg)
		}
	}
	if err := CheckBytes("x", []int64{2}, "float32", 2, 4, 8); err != nil {
		t.Error(err)
	}
	if err := CheckBytes("x", []int64{2}, "float32", 2, 4, 7); err == nil || !strings.Contains(err.Error(), "8 bytes, but 7 given") {
		t.Errorf("short data: %v", err)
	}
}

// TestCancelOn: the cancel runs when the context ends, and never once stop has returned.
func TestCancelOn(t *testing.T) {
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	stop := CancelOn(ctx, func() { calls.Add(1) })
	cancel()
	stop() // waits for the cancel if it is under way
	if calls.Load() > 1 {
		t.Fatalf("cancel ran %d times", calls.Load())
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	stop2 := CancelOn(ctx2, func() { calls.Add(10) })
	stop2()
	cancel2()
	if calls.Load() >= 10 {
		t.Fatal("cancel ran after stop")
	}
}

func TestLibraryOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "libx.so")
	l := &Library{Name: "X", File: "libx.so", Env: "TORCHD_TEST_X_LIB", Make: "make x"}
	fail := func(notFound bool, msg string) error {
		if notFound {
			return errors.New("not found: " + msg)
		}
		return errors.New(msg)
	}
	t.Setenv(l.Env, file)
	err := l.Open("", func(string) error { t.Fatal("opened a missing file"); return nil }, fail)
	if err == nil || !strings.HasPrefix(err.Error(), "not found: X library not found (looked for "+file+"); run `make x` or set TORCHD_TEST_X_LIB") {
		t.Fatalf("missing library: %v", err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("cannot load")
	if err := l.Open("", func(string) error { return bad }, fail); err != bad || l.Path() != "" {
		t.Fatalf("a failed open: %v, path %q", err, l.Path())
	}
	var opened string
	if err := l.Open("", func(p string) error { opened = p; return nil }, fail); err != nil || opened != file || l.Path() != file {
		t.Fatalf("open: %v, opened %q, path %q", err, opened, l.Path())
	}
	if err := l.Open("", func(string) error { t.Fatal("opened twice"); return nil }, fail); err != nil {
		t.Fatalf("a second open: %v", err)
	}
	if err := l.Open("/elsewhere/libx.so", nil, fail); err == nil || !strings.Contains(err.Error(), "already loaded from "+file) {
		t.Fatalf("another path: %v", err)
	}
}
