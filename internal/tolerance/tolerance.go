// Package tolerance states, once for every test, how far apart two float32 answers of one
// model may be when only the kernels that computed them differ. A batch of another size,
// another thread count, another CPU (AVX2, AVX-512, AMX) or Python against the Go binding
// runs other kernels, which round in another order and change the last bits: tests compare
// such answers within Kernels, never as formatted text, where a rounding boundary can fall
// between two answers that agree to 1e-6.
package tolerance

// Kernels is the largest absolute difference allowed between float32 outputs (logits,
// tensors) of one model on one input computed by different kernels. The zoo's outputs are
// of order 1 to 10, where a float32's last bit is 1e-7 to 1e-6.
const Kernels = 1e-5
