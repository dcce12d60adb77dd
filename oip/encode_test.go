package oip

import (
	"encoding/json"
	"testing"
)

// appendJSONString writes what json.Marshal writes for every string: the plain ones it
// appends as they are, the rest (quotes, controls, HTML's <>&, non-ASCII, invalid UTF-8) go
// through json.Marshal.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "onnx-mnist-cpu", "input.1", "19", "a b~", `q"uote`, `back\slash`, "tab\t", "nl\n",
		"<b>&amp;", "héllo", "\u2028", "\xff\xfe", "\x7f", "\x00"} {
		checkJSONString(t, s)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"model", "x\"y", "\x1f", "é", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

func checkJSONString(t *testing.T, s string) {
	want, _ := json.Marshal(s)
	if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
		t.Errorf("appendJSONString(%q) = %s, want x%s", s, got, want)
	}
}
