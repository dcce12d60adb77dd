package archive

import (
	"archive/zip"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A package made by plain torch._inductor.aoti_compile_and_package carries no torchd metadata;
// its inputs' dtypes and bounds are known only to its generated C++, which checks them (when
// AOTI_RUNTIME_CHECK_INPUTS is set) in one check_input_<n> function per input. torch is pinned
// (models/requirements.txt), so the form of those checks is fixed; a package without them is
// served from the config's declared inputs instead.

var (
	checkFunc     = regexp.MustCompile(`static void check_input_(\d+)\(`)
	checkDType    = regexp.MustCompile(`_expected_dtype = aoti_torch_dtype_(\w+)\(\)`)
	checkMin      = regexp.MustCompile(`if \(\w+_size\[(\d+)\] < (\d+)\)`)
	checkMax      = regexp.MustCompile(`if \(\w+_size\[(\d+)\] > (\d+)\)`)
	checkStatic   = regexp.MustCompile(`if \((\d+) != \w+_size\[(\d+)\]\)`)
	checkAnyIndex = regexp.MustCompile(`\w+_size\[(\d+)\]`)
)

// aotiDTypes maps the generated code's dtype names to torchd's.
var aotiDTypes = map[string]string{
	"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64",
	"int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}

// plainSignature reads the input specs of a package without torchd metadata from its
// generated wrapper code: inputs named input__<n>, their dtypes, ranks and bounds. A lower
// bound of 2, which torch.export gives a dynamic dimension (it specializes 0 and 1), is read
// as 1: the compiled code runs one row, as torchd's own packages do.
func plainSignature(r *zip.Reader, md map[string]string) (*PackageSignature, error) {
	var src []byte
	for _, f := range r.File {
		if strings.HasSuffix(f.Name, ".wrapper.cpp") && path.Base(path.Dir(f.Name)) == "model" {
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			src, err = io.ReadAll(io.LimitReader(rc, 256<<20))
			rc.Close()
			if err != nil {
				return nil, err
			}
			break
		}
	}
	if src == nil {
		return nil, nil
	}
	text := string(src)
	locs := checkFunc.FindAllStringSubmatchIndex(text, -1)
	if len(locs) == 0 {
		return nil, nil
	}
	type body struct {
		n    int
		text string
	}
	var bodies []body
	for i, l := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		n, _ := strconv.Atoi(text[l[2]:l[3]])
		b := text[l[1]:end]
		if j := strings.Index(b, "\n}\n"); j >= 0 {
			b = b[:j]
		}
		bodies = append(bodies, body{n, b})
	}
	sort.Slice(bodies, func(i, j int) bool { return bodies[i].n < bodies[j].n })
	s := &PackageSignature{Device: md[metaDevice], Precision: "fp32", Plain: true}
	for i, b := range bodies {
		if b.n != i {
			return nil, fmt.Errorf("%w: the package's generated input checks skip input %d", ErrUnsupportedModel, i)
		}
		in := PackageTensor{Name: fmt.Sprintf("input__%d", i)}
		if m := checkDType.FindStringSubmatch(b.text); m != nil {
			in.DType = aotiDTypes[m[1]]
		}
		if in.DType == "" {
			return nil, fmt.Errorf("%w: the package's input %d has a dtype torchd does not serve", ErrUnsupportedModel, i)
		}
		rank := 0
		for _, m := range checkAnyIndex.FindAllStringSubmatch(b.text, -1) {
			d, _ := strconv.Atoi(m[1])
			rank = max(rank, d+1)
		}
		in.Shape, in.Min, in.Max = make([]int64, rank), make([]int64, rank), make([]int64, rank)
		for d := range rank {
			in.Shape[d], in.Min[d], in.Max[d] = -1, 1, 1<<62
		}
		for _, m := range checkStatic.FindAllStringSubmatch(b.text, -1) {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			d, _ := strconv.Atoi(m[2])
			in.Shape[d], in.Min[d], in.Max[d] = v, v, v
		}
		for _, m := range checkMin.FindAllStringSubmatch(b.text, -1) {
			d, _ := strconv.Atoi(m[1])
			v, _ := strconv.ParseInt(m[2], 10, 64)
			if v == 2 {
				v = 1
			}
			in.Min[d] = v
		}
		for _, m := range checkMax.FindAllStringSubmatch(b.text, -1) {
			d, _ := strconv.Atoi(m[1])
			v, _ := strconv.ParseInt(m[2], 10, 64)
			in.Max[d] = v
		}
		s.Inputs = append(s.Inputs, in)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// isExportedProgram reports whether the archive is a torch.export.save program (models/
// and data/weights/, no compiled code).
func isExportedProgram(r *zip.Reader) bool {
	program, compiled := false, false
	for _, f := range r.File {
		if strings.Contains(f.Name, "/data/aotinductor/") {
			compiled = true
		}
		if strings.HasSuffix(path.Dir(f.Name), "/models") && strings.HasSuffix(f.Name, ".json") {
			program = true
		}
	}
	return program && !compiled
}
