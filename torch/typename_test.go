package torch_test

import (
	"testing"

	"github.com/torchd/torchd/torch"
)

// Messages name values by their TorchScript types, never Go's.
func TestTypeName(t *testing.T) {
	x, _ := torch.NewTensor([]float32{1})
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, "None"}, {true, "bool"}, {int64(1), "int"}, {2.5, "float"}, {"s", "str"}, {x, "Tensor"},
		{torch.Tuple{map[string]any{"loss": x}, []any{map[string]any{"boxes": x, "scores": x}}}, "Tuple[Dict[str, Tensor], List[Dict[str, Tensor]]]"},
		{map[string]any{"out": x, "aux": x}, "Dict[str, Tensor]"},
		{map[int64]any{3: "a"}, "Dict[int, str]"},
		{[]any{}, "List"}, {map[string]any{}, "Dict"}, {struct{}{}, "an unknown value"},
	} {
		if got := torch.TypeName(c.v); got != c.want {
			t.Errorf("TypeName(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
