package torch

/*
#include "torchd.h"
*/
import "C"

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// Tuple is a TorchScript tuple. Values passed to and returned from Module.Run are Go values:
//
//	None → nil, bool → bool, int → int64 (int and int32 accepted), float → float64
//	(float32 accepted), str → string, Tensor → *Tensor, Tuple → Tuple,
//	List → []any ([]*Tensor, []int64, []float64 and []string accepted),
//	Dict[str, V] → map[string]any, Dict[int, V] → map[int64]any (map[string]*Tensor accepted).
type Tuple []any

// encoder flattens Go values into td_nodes in pre-order. Strings and shapes go into arenas
// whose addresses are patched in once the arenas stop growing; every Go buffer a node points
// at is pinned for the duration of the call.
type encoder struct {
	nodes  []C.td_node
	shapes []int64
	strs   []byte
	// offsets into the arenas, per node index
	shapeOff map[int]int
	strOff   map[int]int
	pinner   runtime.Pinner
	tensors  []*Tensor
}

func (e *encoder) add(n C.td_node) int {
	e.nodes = append(e.nodes, n)
	return len(e.nodes) - 1
}

func (e *encoder) container(kind C.int32_t, n int) {
	e.add(C.td_node{kind: kind, n_children: C.int32_t(n)})
}

func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case nil:
		e.add(C.td_node{kind: C.TD_NONE})
	case bool:
		var i C.int64_t
		if x {
			i = 1
		}
		e.add(C.td_node{kind: C.TD_BOOL, i: i})
	case int:
		e.add(C.td_node{kind: C.TD_INT, i: C.int64_t(x)})
	case int64:
		e.add(C.td_node{kind: C.TD_INT, i: C.int64_t(x)})
	case int32:
		e.add(C.td_node{kind: C.TD_INT, i: C.int64_t(x)})
	case float64:
		e.add(C.td_node{kind: C.TD_DOUBLE, d: C.double(x)})
	case float32:
		e.add(C.td_node{kind: C.TD_DOUBLE, d: C.double(x)})
	case string:
		idx := e.add(C.td_node{kind: C.TD_STRING, str_len: C.int64_t(len(x))})
		e.strOff[idx] = len(e.strs)
		e.strs = append(e.strs, x...)
	case *Tensor:
		return e.tensor(x)
	case Tuple:
		e.container(C.TD_TUPLE, len(x))
		return e.values(x)
	case []any:
		e.container(C.TD_LIST, len(x))
		return e.values(x)
	case []*Tensor:
		e.container(C.TD_LIST, len(x))
		for _, t := range x {
			if err := e.tensor(t); err != nil {
				return err
			}
		}
	case []int64:
		e.container(C.TD_LIST, len(x))
		for _, i := range x {
			e.add(C.td_node{kind: C.TD_INT, i: C.int64_t(i)})
		}
	case []float64:
		e.container(C.TD_LIST, len(x))
		for _, f := range x {
			e.add(C.td_node{kind: C.TD_DOUBLE, d: C.double(f)})
		}
	case []string:
		e.container(C.TD_LIST, len(x))
		for _, s := range x {
			if err := e.value(s); err != nil {
				return err
			}
		}
	case map[string]any:
		e.container(C.TD_DICT, 2*len(x))
		for k, val := range x {
			_ = e.value(k)
			if err := e.value(val); err != nil {
				return err
			}
		}
	case map[string]*Tensor:
		e.container(C.TD_DICT, 2*len(x))
		for k, t := range x {
			_ = e.value(k)
			if err := e.tensor(t); err != nil {
				return err
			}
		}
	case map[int64]any:
		e.container(C.TD_DICT, 2*len(x))
		for k, val := range x {
			e.add(C.td_node{kind: C.TD_INT, i: C.int64_t(k)})
			if err := e.value(val); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("torch: unsupported input type %T", v)
	}
	return nil
}

func (e *encoder) values(vs []any) error {
	for _, v := range vs {
		if err := e.value(v); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) tensor(t *Tensor) error {
	if t == nil {
		return fmt.Errorf("torch: nil *Tensor input")
	}
	if t.closed {
		return ErrClosed
	}
	n := C.td_node{kind: C.TD_TENSOR, dtype: C.int32_t(t.dtype), ndim: C.int32_t(len(t.shape))}
	if t.h != nil {
		n.tensor = t.h
	} else if t.data != nil {
		e.pinner.Pin(t.data)
		n.data = t.data
	}
	idx := e.add(n)
	e.shapeOff[idx] = len(e.shapes)
	e.shapes = append(e.shapes, t.shape...)
	e.tensors = append(e.tensors, t)
	return nil
}

// finish points nodes at the arenas, which no longer grow, and pins them.
func (e *encoder) finish() {
	if len(e.shapes) > 0 {
		e.pinner.Pin(&e.shapes[0])
		for idx, off := range e.shapeOff {
			if e.nodes[idx].ndim > 0 {
				e.nodes[idx].shape = (*C.int64_t)(unsafe.Pointer(&e.shapes[off]))
			}
		}
	}
	if len(e.strs) > 0 {
		e.pinner.Pin(&e.strs[0])
		for idx, off := range e.strOff {
			if e.nodes[idx].str_len > 0 {
				e.nodes[idx].str = (*C.char)(unsafe.Pointer(&e.strs[off]))
			}
		}
	}
}

// decode rebuilds Go values from a result's nodes, taking ownership of its tensor handles.
type decoder struct {
	nodes []C.td_node
	pos   int
}

func (d *decoder) value() (any, error) {
	if d.pos >= len(d.nodes) {
		return nil, fmt.Errorf("torch: malformed result")
	}
	n := &d.nodes[d.pos]
	d.pos++
	switch n.kind {
	case C.TD_NONE:
		return nil, nil
	case C.TD_BOOL:
		return n.i != 0, nil
	case C.TD_INT:
		return int64(n.i), nil
	case C.TD_DOUBLE:
		return float64(n.d), nil
	case C.TD_STRING:
		return C.GoStringN(n.str, C.int(n.str_len)), nil
	case C.TD_TENSOR:
		shape := make([]int64, int(n.ndim))
		if n.ndim > 0 {
			copy(shape, unsafe.Slice((*int64)(unsafe.Pointer(n.shape)), int(n.ndim)))
		}
		t := newNativeTensor(n.tensor, DType(n.dtype), shape, n.data)
		n.tensor = nil // owned by t now
		return t, nil
	case C.TD_TUPLE, C.TD_LIST:
		items := make([]any, int(n.n_children))
		for i := range items {
			v, err := d.value()
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		if n.kind == C.TD_TUPLE {
			return Tuple(items), nil
		}
		return items, nil
	case C.TD_DICT:
		return d.dict(int(n.n_children) / 2)
	}
	return nil, fmt.Errorf("torch: unknown result kind %d", int(n.kind))
}

func (d *decoder) dict(pairs int) (any, error) {
	var strMap map[string]any
	var intMap map[int64]any
	for range pairs {
		k, err := d.value()
		if err != nil {
			return nil, err
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		switch key := k.(type) {
		case string:
			if strMap == nil {
				strMap = make(map[string]any, pairs)
			}
			strMap[key] = v
		case int64:
			if intMap == nil {
				intMap = make(map[int64]any, pairs)
			}
			intMap[key] = v
		default:
			closeValue(v)
			closeValue(k)
			return nil, fmt.Errorf("torch: the result holds a dict whose keys are %s; torchd reads str and int keys", TypeName(k))
		}
	}
	if intMap != nil {
		return intMap, nil
	}
	if strMap == nil {
		strMap = map[string]any{}
	}
	return strMap, nil
}

// closeValue closes every tensor inside v.
func closeValue(v any) {
	switch x := v.(type) {
	case *Tensor:
		x.Close()
	case Tuple:
		for _, e := range x {
			closeValue(e)
		}
	case []any:
		for _, e := range x {
			closeValue(e)
		}
	case map[string]any:
		for _, e := range x {
			closeValue(e)
		}
	case map[int64]any:
		for _, e := range x {
			closeValue(e)
		}
	}
}

// CloseValue closes every tensor inside a value returned by Module.Run.
func CloseValue(v any) { closeValue(v) }

// TypeName names a value of Module.Run's result by its TorchScript type, for messages that
// users read: "Tensor", "Tuple[Dict[str, Tensor], List[Dict[str, Tensor]]]", "int", ... A
// list or dict is named after its first item (a dict's in key order); an empty one is
// "List" or "Dict".
func TypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int, int32, int64:
		return "int"
	case float32, float64:
		return "float"
	case string:
		return "str"
	case *Tensor:
		return "Tensor"
	case Tuple:
		names := make([]string, len(x))
		for i, e := range x {
			names[i] = TypeName(e)
		}
		return "Tuple[" + strings.Join(names, ", ") + "]"
	case []any:
		if len(x) == 0 {
			return "List"
		}
		return "List[" + TypeName(x[0]) + "]"
	case []*Tensor:
		return "List[Tensor]"
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		if len(keys) == 0 {
			return "Dict"
		}
		return "Dict[str, " + TypeName(x[keys[0]]) + "]"
	case map[int64]any:
		keys := slices.Sorted(maps.Keys(x))
		if len(keys) == 0 {
			return "Dict"
		}
		return "Dict[int, " + TypeName(x[keys[0]]) + "]"
	}
	return "an unknown value"
}
