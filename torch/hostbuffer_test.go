package torch_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/torchd/torchd/torch"
)

// Pinned memory needs a CUDA device. Without one (a CPU build, or a machine with no GPU) a
// host buffer asked to be pinned is ordinary memory and no error, and a forward over it
// answers what the same forward over Go memory answers.
func TestHostBufferWithoutCUDA(t *testing.T) {
	if torch.CUDAAvailable() {
		t.Skip("this LibTorch has a CUDA device: the buffer is pinned")
	}
	m, err := torch.Load(zoo(t, "digits", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const rows = 3
	n := 4 * rows * 784
	b, err := torch.NewHostBuffer(n, true)
	if err != nil {
		t.Fatalf("pinned memory on a CPU build: %v, want ordinary memory", err)
	}
	defer b.Close()
	if b.Pinned() {
		t.Error("the buffer reports pinned memory without a CUDA device")
	}
	host := b.Bytes()
	if len(host) != n {
		t.Fatalf("buffer of %d bytes, want %d", len(host), n)
	}
	goMem := make([]byte, n)
	for k := 0; k < n; k += 4 {
		binary.LittleEndian.PutUint32(goMem[k:], math.Float32bits(float32(k%251)/251))
	}
	copy(host, goMem)
	run := func(data []byte) []float32 {
		x, err := torch.FromBytes(torch.Float32, data, rows, 1, 28, 28)
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		defer torch.CloseValue(out)
		v, err := torch.Data[float32](out.(*torch.Tensor))
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), v...)
	}
	want, got := run(goMem), run(host)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("output %d: %v over the host buffer, %v over Go memory", i, got[i], want[i])
		}
	}
	b.Close()
	b.Close() // idempotent
	if b.Bytes() != nil {
		t.Error("a closed buffer still gives its bytes")
	}
}

func TestHostBufferRefusesNegativeSize(t *testing.T) {
	if _, err := torch.NewHostBuffer(-1, true); err == nil {
		t.Fatal("a host buffer of -1 bytes: no error")
	}
	b, err := torch.NewHostBuffer(0, false)
	if err != nil {
		t.Fatalf("an empty host buffer: %v", err)
	}
	if len(b.Bytes()) != 0 {
		t.Errorf("an empty host buffer has %d bytes", len(b.Bytes()))
	}
	b.Close()
}
