package bytestr

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := [][]byte{[]byte("a"), {}, []byte("été"), bytes.Repeat([]byte("x"), 300), {0, 1}}
	got, err := Split(Join(in))
	if err != nil || len(got) != len(in) {
		t.Fatalf("Split(Join): %q %v", got, err)
	}
	for i := range in {
		if !bytes.Equal(got[i], in[i]) {
			t.Errorf("element %d: %q, want %q", i, got[i], in[i])
		}
	}
	if n, err := Count(Join(in)); n != int64(len(in)) || err != nil {
		t.Errorf("Count: %d %v", n, err)
	}
	if n, err := Count(nil); n != 0 || err != nil {
		t.Errorf("Count(nil): %d %v", n, err)
	}
}

func TestMalformed(t *testing.T) {
	for name, data := range map[string][]byte{
		"cut prefix":   {1, 0},
		"long length":  {9, 0, 0, 0, 'a'},
		"huge length":  {0xff, 0xff, 0xff, 0xff},
		"second short": append(Join([][]byte{[]byte("ok")}), 1),
	} {
		if _, err := Split(data); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Split returns slices that cannot grow into the next element.
func TestSplitCapacity(t *testing.T) {
	data := Join([][]byte{[]byte("ab"), []byte("cd")})
	s, _ := Split(data)
	_ = append(s[0], 'X')
	if again, _ := Split(data); string(again[1]) != "cd" {
		t.Errorf("appending to an element overwrote the next: %q", again[1])
	}
}
