package handlerproc

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/handlers"
)

// A prediction carries explain: False whatever the client sent, as TorchServe's frontend
// sets it; a request of rows is one worker request per row, each with its fields.
func TestPreprocessHeadersAndRows(t *testing.T) {
	headers := func(yield func(string, string) bool) {
		_ = yield("Explain", "True") && yield("X-Id", "7")
	}
	s, err := pythonHandler{}.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Data: []byte("x")}}, Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	c := s.State.(*call)
	got := map[string]string{}
	for _, h := range c.reqs[0].Headers {
		got[h.Name] += h.Value
	}
	if len(c.reqs) != 1 || got["explain"] != "False" || got["Explain"] != "" || got["X-Id"] != "7" || c.reqs[0].Params[0].Name != "body" {
		t.Errorf("prediction: %+v", c.reqs)
	}

	rows := [][]handlers.Payload{
		{{Name: "data", ContentType: "application/json", Data: []byte(`"aGk="`)}},
		{{Name: "data", ContentType: "application/json", Data: []byte(`"eA=="`)}, {Name: "target", ContentType: "application/json", Data: []byte(`2`)}},
	}
	s, err = pythonHandler{}.Preprocess(&handlers.Request{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	c = s.State.(*call)
	if s.Items != 2 || len(c.reqs) != 2 || !c.rows || c.reqs[0].ID == c.reqs[1].ID || len(c.reqs[1].Params) != 2 {
		t.Fatalf("rows: %d items, %+v", s.Items, c.reqs)
	}
	// The answer is the list of the rows' answers: JSON as it is, text as a string.
	c.replies = []*Reply{{ID: c.reqs[0].ID, Body: []byte("7")}, {ID: c.reqs[1].ID, Body: []byte("not json")}}
	resp, err := pythonHandler{}.Postprocess(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	var list []any
	if json.Unmarshal(resp.Body, &list) != nil || len(list) != 2 || list[0] != 7.0 || list[1] != "not json" {
		t.Errorf("answer: %s", resp.Body)
	}
	// A row the handler refused fails the request with its status.
	c.replies[1] = &Reply{ID: c.reqs[1].ID, Status: 422, Reason: "bad row"}
	var he *handlers.Error
	if _, err := (pythonHandler{}).Postprocess(s, nil); !errors.As(err, &he) || he.Code != 422 || !errors.Is(err, errkind.BadInput) {
		t.Errorf("a refused row: %v", err)
	}
}
