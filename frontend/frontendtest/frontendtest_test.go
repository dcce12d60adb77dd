package frontendtest

import "testing"

// Numbers match within the tolerance, relative above 1; anything else must be equal.
func TestJSONEqual(t *testing.T) {
	for _, c := range []struct {
		got, want string
		equal     bool
	}{
		{`{"a": [1.0000001, "x"], "b": null}`, `{"b": null, "a": [1, "x"]}`, true},
		{`{"a": 1000.0001}`, `{"a": 1000}`, true},
		{`{"a": 1.001}`, `{"a": 1}`, false},
		{`{"a": "1"}`, `{"a": 1}`, false},
		{`{"a": [1]}`, `{"a": [1, 2]}`, false},
		{`{"a": 1, "c": 2}`, `{"a": 1, "b": 2}`, false},
		{`[1`, `[1]`, false},
	} {
		if err := JSONEqual([]byte(c.got), []byte(c.want), 1e-6); (err == nil) != c.equal {
			t.Errorf("%s against %s: %v, want equal %v", c.got, c.want, err, c.equal)
		}
	}
}
