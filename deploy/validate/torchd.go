package validate

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Settings returns torchd's configuration keys, and their environment variables, read
// from the settings table in daemon/config.go. Parsing the source instead of importing the
// package keeps LibTorch (cgo) out of this module.
func Settings(configGo string) (map[string][]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), configGo, nil, 0)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "settings" || len(vs.Values) != 1 {
			return true
		}
		list, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			return false
		}
		for _, e := range list.Elts {
			lit, ok := e.(*ast.CompositeLit)
			if !ok {
				continue
			}
			var key string
			var env []string
			for _, kv := range lit.Elts {
				kv, ok := kv.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch kv.Key.(*ast.Ident).Name {
				case "key":
					key = stringLit(kv.Value)
				case "env":
					if c, ok := kv.Value.(*ast.CompositeLit); ok {
						for _, e := range c.Elts {
							env = append(env, stringLit(e))
						}
					}
				}
			}
			if key != "" {
				out[key] = append(env, "TORCHD_"+strings.ToUpper(key))
			}
		}
		return false
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no settings table found", configGo)
	}
	return out, nil
}

func stringLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		s, _ := strconv.Unquote(b.Value)
		return s
	}
	return ""
}

// TorchdTOML is a parsed torchd.toml: key → value as torchd reads it (lists joined by commas).
type TorchdTOML map[string]string

// ParseTorchdTOML parses a torchd.toml and refuses keys that are not torchd settings, as
// torchd does at start-up.
func ParseTorchdTOML(text string, settings map[string][]string) (TorchdTOML, error) {
	raw := map[string]any{}
	md, err := toml.Decode(text, &raw)
	if err != nil {
		return nil, err
	}
	out := TorchdTOML{}
	for _, k := range md.Keys() {
		name := k.String()
		if _, ok := settings[name]; !ok {
			return nil, fmt.Errorf("unknown key %q: torchd would refuse to start", name)
		}
		switch x := raw[name].(type) {
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			out[name] = strings.Join(parts, ",")
		default:
			out[name] = fmt.Sprint(x)
		}
	}
	return out, nil
}

// ParseFlags reads the `--key=value` arguments of `torchd serve` into settings keys,
// refusing flags torchd does not have. The manifests always write the value after "=": a
// bare boolean flag followed by a separate value would be read differently by torchd.
func ParseFlags(args []string, settings map[string][]string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			return nil, fmt.Errorf("argument %q: write torchd flags as --key=value", a)
		}
		key := strings.ReplaceAll(name, "-", "_")
		if _, known := settings[key]; !known && key != "config" && key != "ts_config" {
			return nil, fmt.Errorf("unknown flag %q", a)
		}
		out[key] = val
	}
	return out, nil
}

// Duration reads a torchd duration setting: a Go duration, or a number of unit.
func Duration(v string, unit time.Duration) (time.Duration, error) {
	if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, fmt.Errorf("not a duration: %q", v)
	}
	return time.Duration(f * float64(unit)), nil
}
