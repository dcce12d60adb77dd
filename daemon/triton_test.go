package daemon

import (
	"reflect"
	"strings"
	"testing"
)

func TestForwardArgs(t *testing.T) {
	for schema, want := range map[string][]string{
		"forward(__torch__.Net self, Tensor x) -> Tensor":                                              {"x"},
		"forward(__torch__.M self, Tensor input_ids, Tensor? mask=None) -> (Tensor, Tensor)":           {"input_ids", "mask"},
		"forward(__torch__.M self, Tensor[] xs, Tensor y) -> Tensor":                                   {"xs", "y"},
		"forward(__torch__.a.b.M self, Tensor a, (Tensor, Tensor) pair, int k=3) -> Dict(str, Tensor)": {"a", "pair", "k"},
	} {
		got, err := forwardArgs(schema)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, want %v", schema, got, err, want)
		}
	}
	if _, err := forwardArgs("forward(__torch__.M self, Dict(str, Tensor) inputs) -> Tensor"); err == nil || !strings.Contains(err.Error(), "Dict(str, Tensor) inputs") {
		t.Errorf("a dict input: %v", err)
	}
}
