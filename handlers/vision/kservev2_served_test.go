package vision_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"math"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/torchd/torchd/oip"
	pb "github.com/torchd/torchd/proto/inference"
)

// The detector and the segmenter over KServe v2, REST and gRPC, as TorchServe's kservev2
// envelope serves an image: a BYTES input (base64 text in JSON, as TorchServe's examples send
// it; the raw file in binary data and over gRPC) goes through the handler, and its answer
// comes back as one output named after the input: the detections one BYTES element each, the
// segmentation flattened to numbers. Each is compared with Python's.

// tsV2Response is a v2 answer whose outputs' data are kept as JSON.
type tsV2Response struct {
	ID           string `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name     string            `json:"name"`
		Datatype string            `json:"datatype"`
		Shape    []int64           `json:"shape"`
		Data     []json.RawMessage `json:"data"`
	} `json:"outputs"`
}

// bytesElement is one BYTES element as the binary extension and raw contents carry it.
func bytesElement(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// v2Image posts img to model over REST v2 as one BYTES input named input-0: base64 in JSON,
// or the raw bytes with the binary extension; it returns the one output.
func v2Image(t *testing.T, s *server, model string, img []byte, binaryData bool) (name, datatype string, shape []int64, data []json.RawMessage) {
	t.Helper()
	var r response
	if binaryData {
		body, hlen, err := oip.EncodeRequest(&oip.InferRequest{ID: "r1"}, []oip.Tensor{{Name: "input-0", Datatype: "BYTES", Shape: []int64{1}, Data: bytesElement(img)}}, true)
		if err != nil {
			t.Fatal(err)
		}
		req := must(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/octet-stream", body)
		req.Header.Set(oip.HeaderContentLength, strconv.Itoa(hlen))
		r = send(t, req)
	} else {
		body, _ := json.Marshal(map[string]any{"id": "r1", "inputs": []any{map[string]any{
			"name": "input-0", "shape": []int{1}, "datatype": "BYTES", "data": []string{base64.StdEncoding.EncodeToString(img)}}}})
		r = do(t, "POST", s.inf+"/v2/models/"+model+"/infer", "application/json", body)
	}
	var resp tsV2Response
	r.json(t, &resp)
	if r.status != 200 || resp.ID != "r1" || len(resp.Outputs) != 1 {
		t.Fatalf("%s over v2 (binary %v): %d %.300s", model, binaryData, r.status, r.body)
	}
	o := resp.Outputs[0]
	return o.Name, o.Datatype, o.Shape, o.Data
}

// grpcImage sends img to model over gRPC v2 as one BYTES input named input-0, in typed
// contents or raw, and returns the one output's name and datatype, and its elements: BYTES
// ones, or FP64 numbers, typed or raw as the request was.
func grpcImage(t *testing.T, c pb.GRPCInferenceServiceClient, model string, img []byte, raw bool) (name, datatype string, elems [][]byte, numbers []float64) {
	t.Helper()
	in := &pb.ModelInferRequest_InferInputTensor{Name: "input-0", Datatype: "BYTES", Shape: []int64{1}}
	req := &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
	if raw {
		req.RawInputContents = [][]byte{bytesElement(img)}
	} else {
		in.Contents = &pb.InferTensorContents{BytesContents: [][]byte{img}}
	}
	r, err := c.ModelInfer(callCtx(t), req)
	if err != nil {
		t.Fatalf("%s over gRPC v2 (raw %v): %v", model, raw, err)
	}
	if len(r.GetOutputs()) != 1 || raw != (len(r.GetRawOutputContents()) == 1) {
		t.Fatalf("%s over gRPC v2 (raw %v): %v", model, raw, r)
	}
	o := r.GetOutputs()[0]
	if !raw {
		return o.GetName(), o.GetDatatype(), o.GetContents().GetBytesContents(), o.GetContents().GetFp64Contents()
	}
	b := r.GetRawOutputContents()[0]
	switch o.GetDatatype() {
	case "BYTES":
		for len(b) >= 4 {
			n := binary.LittleEndian.Uint32(b)
			elems, b = append(elems, b[4:4+n]), b[4+n:]
		}
	case "FP64":
		for ; len(b) >= 8; b = b[8:] {
			numbers = append(numbers, math.Float64frombits(binary.LittleEndian.Uint64(b)))
		}
	}
	return o.GetName(), o.GetDatatype(), elems, numbers
}

// detectorOverKServeV2 is TestObjectDetectorOverHTTPAndGRPC's KServe v2 part, on its server.
func detectorOverKServeV2(t *testing.T, s *server, refs map[string]any) {
	oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	for i, name := range []string{"scene_320x240.png", "scene_200x300.png"} {
		img := visionScenes(t, "detector")[i]
		want := refs[name].([]any)
		for _, bin := range []bool{false, true} {
			n, dt, shape, data := v2Image(t, s, "detector", img, bin)
			if n != "input-0" || dt != "BYTES" || len(shape) != 1 || shape[0] != int64(len(data)) {
				t.Fatalf("REST %s: output %s %s %v", name, n, dt, shape)
			}
			b, _ := json.Marshal(data)
			sameDetections(t, "REST v2 "+name, b, want)
		}
		for _, raw := range []bool{false, true} {
			n, dt, elems, _ := grpcImage(t, oipc, "detector", img, raw)
			if n != "input-0" || dt != "BYTES" {
				t.Fatalf("gRPC %s: output %s %s", name, n, dt)
			}
			var dets []json.RawMessage
			for _, e := range elems {
				dets = append(dets, e)
			}
			b, _ := json.Marshal(dets)
			sameDetections(t, "gRPC v2 "+name, b, want)
		}
	}

	// The image as a float32 [C, H, W] tensor (ToTensor's: RGB in [0, 1]), as TorchServe's
	// vision handlers take a list of numbers: the detector's inputs are a list of images,
	// which no tensor names, so it goes through the handler too.
	img, err := png.Decode(bytes.NewReader(visionScenes(t, "detector")[0]))
	if err != nil {
		t.Fatal(err)
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	chw := make([]float32, 3*h*w)
	for y := range h {
		for x := range w {
			r, g, b, _ := img.At(x, y).RGBA()
			for c, v := range []uint32{r, g, b} {
				chw[c*h*w+y*w+x] = float32(v>>8) / 255
			}
		}
	}
	body, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": "input-0", "shape": []int{3, h, w}, "datatype": "FP32", "data": chw}}})
	r := do(t, "POST", s.inf+"/v2/models/detector/infer", "application/json", body)
	var resp tsV2Response
	r.json(t, &resp)
	if r.status != 200 || len(resp.Outputs) != 1 || resp.Outputs[0].Name != "input-0" || resp.Outputs[0].Datatype != "BYTES" {
		t.Fatalf("FP32 image over v2: %d %.300s", r.status, r.body)
	}
	b, _ := json.Marshal(resp.Outputs[0].Data)
	sameDetections(t, "REST v2 FP32 scene_320x240.png", b, refs["scene_320x240.png"].([]any))

	// What is not an image, or not a list of them, is the client's error, naming the input.
	v2Err := func(body string, status int, part string) {
		t.Helper()
		r := do(t, "POST", s.inf+"/v2/models/detector/infer", "application/json", []byte(body))
		var e struct{ Error string }
		r.json(t, &e)
		if r.status != status || !strings.Contains(e.Error, part) {
			t.Errorf("%s: got %d %s, want %d with %q", body, r.status, r.body, status, part)
		}
	}
	notImage := base64.StdEncoding.EncodeToString([]byte("not an image"))
	v2Err(`{"inputs":[{"name":"input-0","shape":[1],"datatype":"BYTES","data":["`+notImage+`"]}]}`, 400, `bad image: unsupported format: unrecognised leading bytes`)
	v2Err(`{"inputs":[{"name":"input-0","shape":[1],"datatype":"BYTES","data":["not base64!"]}]}`, 400, `bad image: unsupported format: unrecognised leading bytes`)
	v2Err(`{"inputs":[{"name":"input-0","shape":[1],"datatype":"BYTES","data":["AAAA"]}]}`, 400, `bad image: unsupported format: unrecognised leading bytes`)
	v2Err(`{"inputs":[{"name":"input-0","shape":[1,2],"datatype":"BYTES","data":["a","b"]}]}`, 400, `input "input-0": BYTES input must have shape [N] or [N, 1], got [1 2]`)
	v2Err(`{"inputs":[{"name":"input-0","shape":[2,2],"datatype":"FP32","data":[0,0,0,0]}]}`, 400, `input "input-0": a tensor input must be float32 images [C, H, W] or [N, C, H, W], got float32 [2 2]`)
	v2Err(`{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["a"]},{"name":"b","shape":[1],"datatype":"BYTES","data":["b"]}]}`, 400, "takes one input")
	_, err = oipc.ModelInfer(callCtx(t), &pb.ModelInferRequest{ModelName: "detector", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "input-0", Datatype: "BYTES", Shape: []int64{1}}}, RawInputContents: [][]byte{bytesElement([]byte("\x89PNG\r\n\x1a\n"))}})
	wantCode(t, err, codes.InvalidArgument, "png is truncated")
}

// segmenterOverKServeV2 is TestImageSegmenterOverHTTPAndGRPC's KServe v2 part, on its server.
func segmenterOverKServeV2(t *testing.T, s *server, ref, margin []float32) {
	oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	// pixels turns the flattened answer back into TorchServe's [224][224][2] array.
	pixels := func(flat []float64) []byte {
		if len(flat) != 224*224*2 {
			t.Fatalf("%d numbers, want 224 × 224 × 2", len(flat))
		}
		out := make([][][2]float64, 224)
		for y := range out {
			out[y] = make([][2]float64, 224)
			for x := range out[y] {
				out[y][x] = [2]float64{flat[2*(y*224+x)], flat[2*(y*224+x)+1]}
			}
		}
		b, _ := json.Marshal(out)
		return b
	}
	for i, img := range visionScenes(t, "segmenter") {
		for _, bin := range []bool{false, true} {
			n, dt, _, data := v2Image(t, s, "segmenter", img, bin)
			if n != "input-0" || dt != "FP64" {
				t.Fatalf("REST: output %s %s", n, dt)
			}
			flat := make([]float64, len(data))
			for j, d := range data {
				if err := json.Unmarshal(d, &flat[j]); err != nil {
					t.Fatal(err)
				}
			}
			sameSegmentation(t, "REST v2", pixels(flat), ref, margin, i*224*224)
		}
		for _, raw := range []bool{false, true} {
			n, dt, _, numbers := grpcImage(t, oipc, "segmenter", img, raw)
			if n != "input-0" || dt != "FP64" {
				t.Fatalf("gRPC: output %s %s", n, dt)
			}
			sameSegmentation(t, "gRPC v2", pixels(numbers), ref, margin, i*224*224)
		}
	}
}
