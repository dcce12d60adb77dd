package torch

import (
	"fmt"
	"testing"
)

func TestParseArgs(t *testing.T) {
	for schema, want := range map[string]string{
		"forward(__torch__.Net self, Tensor x) -> Tensor":                                              "[{x Tensor}]",
		"forward(__torch__.M self, Tensor input_ids, Tensor? mask=None) -> (Tensor, Tensor)":           "[{input_ids Tensor} {mask Tensor?}]",
		"forward(__torch__.M self, Tensor[] xs, Tensor y) -> Tensor":                                   "[{xs Tensor[]} {y Tensor}]",
		"forward(__torch__.a.b.M self, Tensor a, (Tensor, Tensor) pair, int k=3) -> Dict(str, Tensor)": "[{a Tensor} {pair (Tensor, Tensor)} {k int}]",
		"forward(__torch__.M self, Dict(str, Tensor) inputs) -> Tensor":                                "[{inputs Dict(str, Tensor)}]",
	} {
		got, err := ParseArgs(schema)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%s: %v %v, want %v", schema, got, err, want)
		}
	}
	if _, err := ParseArgs("forward"); err == nil {
		t.Error("a schema without arguments parsed")
	}
}
