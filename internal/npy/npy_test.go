package npy

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, a := range []Array{
		{DType: "float32", Shape: []int64{2, 3}, Data: make([]byte, 24)},
		{DType: "uint8", Shape: []int64{4}, Data: []byte{1, 2, 3, 4}},
		{DType: "int64", Shape: []int64{}, Data: make([]byte, 8)},
		{DType: "bool", Shape: []int64{0, 5}, Data: nil},
	} {
		b, err := Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		if (len(b)-len(a.Data))%64 != 0 {
			t.Errorf("%v: header not padded to 64 bytes", a.Shape)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", a.Shape, err)
		}
		if got.DType != a.DType || len(got.Shape) != len(a.Shape) || !bytes.Equal(got.Data, a.Data) {
			t.Errorf("round trip: got %+v want %+v", got, a)
		}
	}
}

// A header written by numpy 1.24: np.save(f, np.arange(3, dtype=np.float32)).
var numpyHeader = "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }" +
	"                                                            \n"

func TestDecodeNumpy(t *testing.T) {
	b := append([]byte(numpyHeader), make([]byte, 12)...)
	a, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if a.DType != "float32" || len(a.Shape) != 1 || a.Shape[0] != 3 || len(a.Data) != 12 {
		t.Fatalf("got %+v", a)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := append([]byte(numpyHeader), make([]byte, 12)...)
	cases := map[string][]byte{
		"empty":        nil,
		"no magic":     []byte("hello world, this is not npy"),
		"short data":   good[:len(good)-1],
		"long data":    append(append([]byte{}, good...), 0),
		"header len":   append([]byte("\x93NUMPY\x01\x00\xff\xff"), "{}"...),
		"fortran":      []byte(replace(numpyHeader, "False", "True ")),
		"big endian":   []byte(replace(numpyHeader, "<f4", ">f4")),
		"object dtype": []byte(replace(numpyHeader, "<f4", "|O8")),
		"huge shape":   []byte(replace(numpyHeader, "(3,)", "(9999999999,9999999999)")),
		"neg shape":    []byte(replace(numpyHeader, "(3,)", "(-3,)")),
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: got %v, want ErrFormat", name, err)
		}
	}
}

func replace(s, old, new string) string {
	return string(bytes.Replace([]byte(s), []byte(old), []byte(new), 1))
}

func FuzzDecode(f *testing.F) {
	f.Add(append([]byte(numpyHeader), make([]byte, 12)...))
	f.Add([]byte("\x93NUMPY\x02\x00\x10\x00\x00\x00{'descr':'|u1',}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Decode(b)
		if err != nil {
			return
		}
		if _, err := Encode(a); err != nil && a.DType != "int16" {
			t.Fatalf("decoded %q but cannot encode: %v", a.DType, err)
		}
	})
}
