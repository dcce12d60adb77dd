package kserve

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/torchd/torchd/oip"
)

// Each answer becomes an output as NumPy's np.array(answer).flatten() types it.
func TestNDOutput(t *testing.T) {
	cases := []struct{ answer, datatype, data string }{
		{`7`, "INT64", `[7]`},
		{`[[1,2],[3,4]]`, "INT64", `[1,2,3,4]`},
		{`[0.5, 1]`, "FP64", `[0.5,1]`},
		{`[true,false]`, "BOOL", `[true,false]`},
		{`["cat","dog"]`, "BYTES", `["cat","dog"]`},
		{`{"cat":0.9}`, "BYTES", `[{"cat":0.9}]`},
		{`[]`, "FP64", `[]`},
	}
	for _, c := range cases {
		o, err := ndOutput("x", json.RawMessage(c.answer))
		if err != nil {
			t.Fatalf("%s: %v", c.answer, err)
		}
		data, _ := json.Marshal(o.Data)
		if o.Datatype != c.datatype || string(data) != c.data || o.Shape[0] != int64(len(o.Data.([]any))) {
			t.Errorf("%s: %s %v %s, want %s %s", c.answer, o.Datatype, o.Shape, data, c.datatype, c.data)
		}
	}
	if _, err := ndOutput("x", json.RawMessage(`{`)); err == nil {
		t.Error("an answer that is not JSON was taken")
	}
}

// Inputs become rows of name, shape, datatype and data: reshaped, or a BYTES input's first
// element; what JSON cannot carry exactly is refused.
func TestInputRows(t *testing.T) {
	f32 := oip.Tensor{Name: "t", Datatype: "INT32", Shape: []int64{2, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}}
	str := oip.Tensor{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: []byte{2, 0, 0, 0, 'h', 'i', 1, 0, 0, 0, 'x'}}
	rows, names, err := inputRows([]oip.Tensor{f32, str})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[t s]" || len(rows) != 2 {
		t.Fatalf("%v %v", names, rows)
	}
	got := map[string]string{}
	for _, p := range rows[0] {
		got[p.Name] = string(p.Data)
	}
	if got["name"] != `"t"` || got["shape"] != `[2,2]` || got["datatype"] != `"INT32"` || got["data"] != `[[1,2],[3,4]]` {
		t.Errorf("tensor row: %v", got)
	}
	if d := string(rows[1][3].Data); rows[1][3].Name != "data" || d != `"hi"` {
		t.Errorf("BYTES row's data: %s", d)
	}
	if _, _, err := inputRows([]oip.Tensor{{Name: "h", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0, 60}}}); err == nil {
		t.Error("FP16 was taken")
	}
	if _, _, err := inputRows(nil); err == nil {
		t.Error("no inputs were taken")
	}
}

// An object instance's members are its fields in order; any other instance is its body.
func TestInstanceRows(t *testing.T) {
	rows, err := instanceRows(json.RawMessage(`[{"data":"aGk=","target":3}, [1,2], "text"]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(rows[0]) != 2 || rows[0][0].Name != "data" || string(rows[0][0].Data) != `"aGk="` || rows[0][1].Name != "target" || string(rows[0][1].Data) != "3" {
		t.Errorf("object instance: %+v", rows[0])
	}
	if rows[1][0].Name != "body" || string(rows[1][0].Data) != "[1,2]" || string(rows[2][0].Data) != `"text"` {
		t.Errorf("other instances: %+v %+v", rows[1], rows[2])
	}
	for _, bad := range []string{`{"a":1}`, `[]`, `[{"a":}]`} {
		if _, err := instanceRows(json.RawMessage(bad)); err == nil {
			t.Errorf("%s was taken", bad)
		}
	}
}
