package torch

import (
	"fmt"
	"strings"
)

// Arg is one argument of a TorchScript method's schema: its name and its type as the schema
// writes it ("Tensor", "Tensor?", "Dict(str, Tensor)", "(Tensor, Tensor)", "int", ...).
type Arg struct {
	Name string
	Type string
}

// Args returns the arguments of m's method after self, from its schema.
func (m *Module) Args(method string) ([]Arg, error) {
	s, err := m.Schema(method)
	if err != nil {
		return nil, err
	}
	return ParseArgs(s)
}

// ParseArgs reads the arguments after self from a TorchScript schema, e.g.
// "forward(__torch__.Net self, Tensor x, Tensor? mask=None) -> Tensor": [{x Tensor}
// {mask Tensor?}]. Defaults are dropped; nested types keep their commas.
func ParseArgs(schema string) ([]Arg, error) {
	open, close := strings.Index(schema, "("), strings.LastIndex(schema, ") ->")
	if open < 0 || close < open {
		return nil, fmt.Errorf("cannot read the schema %q", schema)
	}
	var args []Arg
	depth, start := 0, open+1
	for i := open + 1; i <= close; i++ {
		switch c := schema[i]; {
		case c == '(' || c == '[':
			depth++
		case (c == ')' || c == ']') && i < close:
			depth--
		case c == ',' && depth == 0 || i == close:
			arg := strings.TrimSpace(schema[start:i])
			start = i + 1
			if arg == "" {
				continue
			}
			typ, name := arg, ""
			if j := strings.LastIndex(arg, " "); j >= 0 {
				typ, name = arg[:j], arg[j+1:]
			}
			name, _, _ = strings.Cut(name, "=")
			if strings.HasPrefix(typ, "__torch__") || name == "self" {
				continue
			}
			args = append(args, Arg{Name: name, Type: strings.TrimSpace(typ)})
		}
	}
	return args, nil
}
