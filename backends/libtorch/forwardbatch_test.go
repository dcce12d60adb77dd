package libtorch_test

import (
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/internal/zootest"
)

// forward_batch over HTTP on the zoo's EfficientNet-Lite0 package, the model it is for: a
// registration's number splits batches of concurrent requests into forwards of that many
// images, and each answer is the one the image gets alone; the archive's own "auto" is
// measured at load, logged and shown in describe; 0 is the whole batch; a count below 0 is a
// 400 that names the parameter.
func TestForwardBatchOverHTTP(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=efficientnet_lite0_pt2.mar&model_name=split&batch_size=8&max_batch_delay=50&initial_workers=1&precision=fp32&forward_batch=3&synchronous=true")
	var d []described
	s.manage("GET", "/models/split").json(t, &d)
	if d[0].ForwardBatch != 3 {
		t.Fatalf("describe: forwardBatch %d, want 3", d[0].ForwardBatch)
	}
	url := "/predictions/split"
	photos := zootest.EffnetPhotos(t, zooDir)
	alone := make([]zootest.TopK, len(photos))
	for i, p := range photos {
		alone[i] = topKOf(t, s.do("POST", url, "image/jpeg", p.Img))
	}
	const rounds = 3
	batched := make([]zootest.TopK, rounds*len(photos))
	forEach(len(batched), 16, func(i int) {
		batched[i] = topKOf(t, s.do("POST", url, "image/jpeg", photos[i%len(photos)].Img))
	})
	for i, k := range batched {
		// Another batch size takes other kernels: the last float32 bits may differ.
		if err := zootest.SameTopK(k, alone[i%len(photos)], tolerance.Kernels); err != nil {
			t.Errorf("%s, concurrent request %d: %v", photos[i%len(photos)].Name, i, err)
		}
	}
	if mean := s.meanBatch(t, "split"); mean <= 1.05 {
		t.Errorf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	// The archive's model-config.toml says forward_batch = "auto".
	s.register(t, "url=efficientnet_lite0_pt2.mar&model_name=auto&batch_size=8&initial_workers=1&synchronous=true")
	d = nil
	s.manage("GET", "/models/auto").json(t, &d)
	if n := d[0].ForwardBatch; n < 1 || n > 8 || n&(n-1) != 0 {
		t.Errorf("forward_batch auto settled at %d; want a measured batch size, a power of two from 1 to 8", n)
	}
	if !strings.Contains(s.Log(), `msg="forward_batch auto" model=auto source=measured`) {
		t.Errorf("no log line for forward_batch auto:\n%s", s.Log())
	}
	if r := topKOf(t, s.do("POST", "/predictions/auto", "image/jpeg", photos[0].Img)); len(r.Labels) == 0 {
		t.Errorf("auto: no answer")
	}

	for _, bad := range []string{"forward_batch=-2", "forward_batch=-1"} {
		errorShape(t, s.manage("POST", "/models?url=efficientnet_lite0_pt2.mar&model_name=bad&"+bad), 400, "BadRequestException", "forward_batch")
	}
	// 0 is the whole batch, as the server's forward_batch takes it.
	s.register(t, "url=efficientnet_lite0_pt2.mar&model_name=whole&batch_size=8&initial_workers=0&forward_batch=0&synchronous=true")
	var whole []described // describe leaves out a forwardBatch of 0
	s.manage("GET", "/models/whole").json(t, &whole)
	if len(whole) != 1 || whole[0].ForwardBatch != 0 {
		t.Errorf("forward_batch=0 described as %+v", whole)
	}
}
