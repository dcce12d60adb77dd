package oip

import (
	"errors"
	"testing"
)

var fuzzEncodings = []string{"", "gzip", "deflate"}

// FuzzDecodeRequest checks that no body makes DecodeRequest panic or return an error that is
// not ErrBadRequest (or ErrRawRequest), and that whatever it accepts is self-consistent and
// survives re-encoding, binary and JSON, byte for byte. Its seed corpus is in
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(layoutRequestBody(), len(layoutRequestHeader), uint8(0))
	f.Add(jsonInput("INT32", "[2,2]", "[[1,2],[3,4]]"), -1, uint8(0))
	f.Add(gzipped(f, layoutRequestBody()), len(layoutRequestHeader), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, headerLen int, enc uint8) {
		req, ts, err := DecodeRequest(body, headerLen, fuzzEncodings[int(enc)%len(fuzzEncodings)], 1<<20)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrRawRequest) {
				t.Fatalf("error %q wraps neither ErrBadRequest nor ErrRawRequest", err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if len(ts) != len(req.Inputs) || len(ts) == 0 {
			t.Fatalf("%d tensors for %d inputs", len(ts), len(req.Inputs))
		}
		for i, tn := range ts {
			if tn.Name != req.Inputs[i].Name || tn.Datatype != req.Inputs[i].Datatype {
				t.Fatalf("tensor %d is %s %s, input is %s %s", i, tn.Name, tn.Datatype, req.Inputs[i].Name, req.Inputs[i].Datatype)
			}
			if err := checkTensor(&tn); err != nil {
				t.Fatalf("accepted an inconsistent tensor: %v", err)
			}
		}
		for _, binary := range []bool{true, false} {
			body2, hl2, err := EncodeRequest(req, ts, binary)
			if err != nil {
				t.Fatalf("re-encoding (binary %v): %v", binary, err)
			}
			_, ts2, err := DecodeRequest(body2, hl2, "", 0)
			if err != nil {
				t.Fatalf("decoding the re-encoded request (binary %v): %v\n%q", binary, err, body2)
			}
			assertTensors(t, ts2, ts)
		}
	})
}
