package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeExample is one command of a ```console block in README.md, with the output shown
// under it.
type readmeExample struct {
	line    int // of the command in README.md
	command string
	output  string
}

// readmeExamples returns the curl commands of README.md's console blocks, in order. A
// command starts with "$ " and goes on over lines that end in a backslash; its output is
// every line up to the next command or the end of the block.
func readmeExamples(t *testing.T, path string) []readmeExample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeExample
	var cur *readmeExample
	inBlock, continued := false, false
	flush := func() {
		if cur != nil && strings.HasPrefix(cur.command, "curl ") {
			cur.output = strings.TrimSpace(cur.output)
			out = append(out, *cur)
		}
		cur = nil
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !inBlock:
			inBlock = line == "```console"
		case line == "```":
			flush()
			inBlock = false
		case continued:
			cur.command += " " + strings.TrimSuffix(strings.TrimSpace(line), `\`)
			continued = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			flush()
			cur = &readmeExample{line: n, command: strings.TrimSuffix(line[2:], `\`)}
			continued = strings.HasSuffix(line, `\`)
		case cur != nil:
			cur.output += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestREADMEExamples runs the README's console examples, in order, with real curl, against
// a server started as `make run` starts it (serve --model-store model-store --models all),
// on free ports. Each answer's status must be the one the README implies (200, or the code
// of an error body it shows), and where the README shows JSON, the answer must have its
// shape: the same keys in the same order (a classifier's labels, most probable first), array
// lengths, strings and booleans. Numbers are compared within 1e-4 plus 0.1% (a batched
// forward, or another CPU, changes the last digits), except in the answers of models trained
// by `make models` (trainedAtBuild): training on another CPU's kernels gives other weights,
// so their probabilities are the machine's, and only the labels' order is the README's.
func TestREADMEExamples(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (make setup installs it)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	modelStore := filepath.Join(root, "model-store")
	if _, err := os.Stat(filepath.Join(modelStore, ".done")); err != nil {
		t.Fatalf("no model store from make archives in %s (run make models): %v", modelStore, err)
	}
	examples := readmeExamples(t, filepath.Join(root, "README.md"))
	if len(examples) < 5 {
		t.Fatalf("README.md has %d curl examples in console blocks; the parser or the README changed", len(examples))
	}
	s := startServer(t, "--model-store", modelStore, "--models", "all")
	deadline := time.Now().Add(5 * time.Minute) // eight models load one after the other
	for !healthy(s) {
		if time.Now().After(deadline) {
			t.Fatalf("not healthy\n%s", s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	ports := strings.NewReplacer(
		"localhost:8080", strings.TrimPrefix(s.inf, "http://"),
		"localhost:8081", strings.TrimPrefix(s.mgmt, "http://"),
		"localhost:8082", strings.TrimPrefix(s.metrics, "http://"))
	for _, ex := range examples {
		const mark = "\n__status__"
		cmd := exec.Command("bash", "-c", ports.Replace(ex.command)+" -sS -w '"+strings.TrimPrefix(mark, "\n")+"%{http_code}'")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+":"+os.Getenv("PATH"))
		b, err := cmd.Output()
		if err != nil {
			t.Errorf("README.md:%d: %s: %v\n%s", ex.line, ex.command, err, b)
			continue
		}
		body, code, ok := strings.Cut(string(b), "__status__")
		status, _ := strconv.Atoi(code)
		if !ok || status == 0 {
			t.Errorf("README.md:%d: %s: no status in %q", ex.line, ex.command, b)
			continue
		}
		want := 200
		var shown any
		isJSON := json.Unmarshal([]byte(ex.output), &shown) == nil
		if m, ok := shown.(map[string]any); ok {
			if c, ok := m["code"].(float64); ok && m["type"] != nil {
				want = int(c)
			}
		}
		if status != want {
			t.Errorf("README.md:%d: %s: status %d, want %d\n%s", ex.line, ex.command, status, want, body)
			continue
		}
		if !isJSON {
			continue
		}
		shownOrdered, err := decodeOrdered(ex.output)
		if err != nil {
			t.Fatalf("README.md:%d: %v", ex.line, err)
		}
		got, err := decodeOrdered(body)
		if err != nil {
			t.Errorf("README.md:%d: %s: the README shows JSON, the answer is not: %v\n%s", ex.line, ex.command, err, body)
			continue
		}
		tol := readmeTolerance
		if trainedAtBuild(ex.command) {
			tol = nil
		}
		if diff := sameShape("", shownOrdered, got, tol); diff != "" {
			t.Errorf("README.md:%d: %s: %s\nREADME:\n%s\nanswer:\n%s", ex.line, ex.command, diff, ex.output, body)
		}
	}
}

func healthy(s *server) bool {
	r, err := httpClient.Get(s.inf + "/ping")
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == 200
}

// trainedAtBuild reports whether command asks a model that `make models` trains (the
// digits CNN, the text classifier, the captioner; their packages too), rather than one whose
// weights are fixed (EfficientNet-Lite0's and MiniLM's, pretrained; resnet18's and the slow
// model's, seeded or computed).
func trainedAtBuild(command string) bool {
	for _, m := range []string{"digits", "textcls", "captioner"} {
		if strings.Contains(command, "/predictions/"+m) || strings.Contains(command, "/v2/models/"+m) ||
			strings.Contains(command, `"model": "`+m) {
			return true
		}
	}
	return false
}

// object is a JSON object with its keys in order.
type object struct {
	keys []string
	vals map[string]any
}

// decodeOrdered decodes one JSON value with its objects as *object, keys in order.
func decodeOrdered(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k.(string))
			o.vals[k.(string)] = v
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return tok, nil
}

// readmeTolerance is how far a number of the README may be from the server's: a batched
// forward, or another CPU, changes the last digits.
func readmeTolerance(want float64) float64 { return 1e-4 + 1e-3*math.Abs(want) }

// sameShape says where got differs from want ("" if nowhere): objects with the same keys in
// the same order, arrays of the same length, equal strings and booleans, and numbers within
// tol(want) of want (tol nil: any number).
func sameShape(path string, want, got any, tol func(want float64) float64) string {
	switch w := want.(type) {
	case *object:
		g, ok := got.(*object)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", path, got)
		}
		if !slices.Equal(w.keys, g.keys) {
			return fmt.Sprintf("%s: keys %v, want %v in this order", path, g.keys, w.keys)
		}
		for _, k := range w.keys {
			if d := sameShape(path+"."+k, w.vals[k], g.vals[k], tol); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want an array of %d, got %v", path, len(w), got)
		}
		for i := range w {
			if d := sameShape(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], tol); d != "" {
				return d
			}
		}
	case float64:
		g, ok := got.(float64)
		if !ok || tol != nil && !(math.Abs(g-w) <= tol(w)) {
			return fmt.Sprintf("%s: %v, want %v", path, got, w)
		}
	default:
		if got != want {
			return fmt.Sprintf("%s: %v, want %v", path, got, want)
		}
	}
	return ""
}
