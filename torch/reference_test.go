package torch_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// The multi-IO model's cases (models/multiio.py documents ref.json) run in both directions:
// Go values go in as tuples, dicts, lists, strings, scalars and tensors of every dtype, and
// what comes out is compared with what Python produced, within 1e-5.
func TestMultiIOMatchesPython(t *testing.T) {
	b, err := os.ReadFile(zoo(t, "multiio", "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var ref struct {
		Cases []struct {
			Name   string `json:"name"`
			Method string `json:"method"`
			Inputs []any  `json:"inputs"`
			Output any    `json:"output"`
			Error  string `json:"error"`
		} `json:"cases"`
	}
	if err := dec.Decode(&ref); err != nil {
		t.Fatal(err)
	}
	m := loadMultiIO(t)
	for _, c := range ref.Cases {
		t.Run(c.Name, func(t *testing.T) {
			args := make([]any, len(c.Inputs))
			for i, in := range c.Inputs {
				v, err := fromJSON(in)
				if err != nil {
					t.Fatalf("input %d: %v", i, err)
				}
				args[i] = v
			}
			out, err := m.Run(c.Method, args...)
			if c.Error != "" {
				if err == nil || !strings.Contains(err.Error(), c.Error) {
					t.Fatalf("error %v, want one containing %q", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer torch.CloseValue(out)
			if err := compare(out, c.Output, "output"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// fromJSON turns a ref.json value into the Go value the binding takes.
func fromJSON(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool, string:
		return x, nil
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return x.Float64()
		}
		return x.Int64()
	case map[string]any:
		if items, ok := x["tuple"]; ok {
			vs, err := listFromJSON(items)
			return torch.Tuple(vs), err
		}
		if items, ok := x["list"]; ok {
			return listFromJSON(items)
		}
		if d, ok := x["dict"].(map[string]any); ok {
			if x["key_type"] == "int" {
				out := map[int64]any{}
				for k, e := range d {
					ik, _ := strconv.ParseInt(k, 10, 64)
					v, err := fromJSON(e)
					if err != nil {
						return nil, err
					}
					out[ik] = v
				}
				return out, nil
			}
			out := map[string]any{}
			for k, e := range d {
				v, err := fromJSON(e)
				if err != nil {
					return nil, err
				}
				out[k] = v
			}
			return out, nil
		}
		return tensorFromJSON(x)
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

func listFromJSON(v any) ([]any, error) {
	items, _ := v.([]any)
	out := make([]any, len(items))
	for i, e := range items {
		var err error
		if out[i], err = fromJSON(e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type jsonTensor struct {
	dtype torch.DType
	shape []int64
	data  []float64
}

func parseJSONTensor(x map[string]any) (jsonTensor, error) {
	var jt jsonTensor
	dt, err := torch.ParseDType(fmt.Sprint(x["dtype"]))
	if err != nil {
		return jt, err
	}
	jt.dtype = dt
	for _, s := range x["shape"].([]any) {
		n, _ := s.(json.Number).Int64()
		jt.shape = append(jt.shape, n)
	}
	for _, e := range x["data"].([]any) {
		switch v := e.(type) {
		case bool:
			f := 0.0
			if v {
				f = 1
			}
			jt.data = append(jt.data, f)
		case json.Number:
			f, _ := v.Float64()
			jt.data = append(jt.data, f)
		}
	}
	return jt, nil
}

func tensorFromJSON(x map[string]any) (*torch.Tensor, error) {
	jt, err := parseJSONTensor(x)
	if err != nil {
		return nil, err
	}
	size := jt.dtype.Size()
	buf := make([]byte, size*len(jt.data))
	for i, f := range jt.data {
		encodeElem(buf[i*size:], jt.dtype, f)
	}
	return torch.FromBytes(jt.dtype, buf, jt.shape...)
}

func encodeElem(b []byte, dt torch.DType, f float64) {
	switch dt {
	case torch.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f)))
	case torch.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(f))
	case torch.Float16:
		binary.LittleEndian.PutUint16(b, floatToHalf(float32(f)))
	case torch.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(f))>>16))
	case torch.Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(f)))
	case torch.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(f)))
	case torch.Uint8, torch.Bool:
		b[0] = uint8(f)
	case torch.Int8:
		b[0] = uint8(int8(f))
	}
}

func decodeElem(b []byte, dt torch.DType) float64 {
	switch dt {
	case torch.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case torch.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case torch.Float16:
		return float64(halfToFloat(binary.LittleEndian.Uint16(b)))
	case torch.BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case torch.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case torch.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case torch.Uint8, torch.Bool:
		return float64(b[0])
	case torch.Int8:
		return float64(int8(b[0]))
	}
	return math.NaN()
}

// floatToHalf converts with round-to-nearest-even; the reference values are exact halves.
func floatToHalf(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		return sign | uint16((mant+(1<<(shift-1)))>>shift)
	}
	h := sign | uint16(exp)<<10 | uint16(mant>>13)
	if mant&0x1fff > 0x1000 || (mant&0x1fff == 0x1000 && h&1 == 1) {
		h++
	}
	return h
}

func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		return math.Float32frombits(sign) + float32(mant)/1024*float32(math.Pow(2, -14))*sign1(sign)
	case 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

func sign1(s uint32) float32 {
	if s != 0 {
		return -1
	}
	return 1
}

// compare checks a binding output against a ref.json value.
func compare(got, want any, path string) error {
	switch w := want.(type) {
	case nil:
		if got != nil {
			return fmt.Errorf("%s: got %v, want None", path, got)
		}
	case bool, string:
		if got != w {
			return fmt.Errorf("%s: got %#v, want %#v", path, got, w)
		}
	case json.Number:
		if strings.ContainsAny(string(w), ".eE") {
			f, _ := w.Float64()
			g, ok := got.(float64)
			if !ok || math.Abs(g-f) > tolerance.Kernels*math.Max(1, math.Abs(f)) {
				return fmt.Errorf("%s: got %#v, want float %v", path, got, f)
			}
		} else {
			i, _ := w.Int64()
			if g, ok := got.(int64); !ok || g != i {
				return fmt.Errorf("%s: got %#v, want int %d", path, got, i)
			}
		}
	case map[string]any:
		return compareContainer(got, w, path)
	default:
		return fmt.Errorf("%s: unexpected reference %T", path, want)
	}
	return nil
}

func compareContainer(got any, w map[string]any, path string) error {
	if items, ok := w["tuple"]; ok {
		g, ok := got.(torch.Tuple)
		if !ok {
			return fmt.Errorf("%s: got %T, want tuple", path, got)
		}
		return compareList(g, items.([]any), path)
	}
	if items, ok := w["list"]; ok {
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: got %T, want list", path, got)
		}
		return compareList(g, items.([]any), path)
	}
	if d, ok := w["dict"].(map[string]any); ok {
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var gv any
			var found bool
			switch g := got.(type) {
			case map[string]any:
				gv, found = g[k]
			case map[int64]any:
				ik, _ := strconv.ParseInt(k, 10, 64)
				gv, found = g[ik]
			}
			if !found {
				return fmt.Errorf("%s: key %q missing from %T", path, k, got)
			}
			if err := compare(gv, d[k], path+"["+k+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	jt, err := parseJSONTensor(w)
	if err != nil {
		return err
	}
	g, ok := got.(*torch.Tensor)
	if !ok {
		return fmt.Errorf("%s: got %T, want tensor", path, got)
	}
	if g.DType() != jt.dtype || !slices.Equal(g.Shape(), jt.shape) {
		return fmt.Errorf("%s: got %v %v, want %v %v", path, g.DType(), g.Shape(), jt.dtype, jt.shape)
	}
	b := g.Bytes()
	size := jt.dtype.Size()
	for i, f := range jt.data {
		v := decodeElem(b[i*size:], jt.dtype)
		if math.Abs(v-f) > tolerance.Kernels*math.Max(1, math.Abs(f)) {
			return fmt.Errorf("%s[%d]: got %v, want %v", path, i, v, f)
		}
	}
	return nil
}

func compareList(got []any, want []any, path string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d items, want %d", path, len(got), len(want))
	}
	for i := range want {
		if err := compare(got[i], want[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}
