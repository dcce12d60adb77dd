package vision

import (
"syscall"
"runtime"
"testing"
)
func cpuNow() int64 { var ru syscall.Rusage; syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); return ru.Utime.Nano() + ru.Stime.Nano() }


func horizontal3old(dst, src []byte, a *axis) {
	for i := range a.start {
		n := int(a.n[i])
		k := a.k[i*a.ksize : i*a.ksize+n]
		s := src[int(a.start[i])*3:]
		s = s[:3*n]
		s0, s1, s2 := int32(1<<(pilPrecisionBits-1)), int32(1<<(pilPrecisionBits-1)), int32(1<<(pilPrecisionBits-1))
		for j, w := range k {
			p := s[3*j : 3*j+3 : 3*j+3]
			s0 += int32(p[0]) * w
			s1 += int32(p[1]) * w
			s2 += int32(p[2]) * w
		}
		d := dst[3*i : 3*i+3 : 3*i+3]
		d[0], d[1], d[2] = clip8(s0), clip8(s1), clip8(s2)
	}
}

func horizontal3u(dst, src []byte, a *axis) {
	ks := a.ksize
	dst = dst[:3*len(a.start)]
	for i, st := range a.start {
		n := int(a.n[i])
		k := a.k[i*ks : i*ks+n]
		s := src[int(st)*3 : (int(st)+n)*3]
		s0, s1, s2 := int32(1<<(pilPrecisionBits-1)), int32(1<<(pilPrecisionBits-1)), int32(1<<(pilPrecisionBits-1))
		for len(k) >= 2 && len(s) >= 6 {
			w0, w1 := k[0], k[1]
			s0 += int32(s[0])*w0 + int32(s[3])*w1
			s1 += int32(s[1])*w0 + int32(s[4])*w1
			s2 += int32(s[2])*w0 + int32(s[5])*w1
			k, s = k[2:], s[6:]
		}
		if len(k) > 0 && len(s) >= 3 {
			w := k[0]
			s0 += int32(s[0]) * w
			s1 += int32(s[1]) * w
			s2 += int32(s[2]) * w
		}
		dst[3*i] = clip8(s0)
		dst[3*i+1] = clip8(s1)
		dst[3*i+2] = clip8(s2)
	}
}

func BenchmarkH3(b *testing.B) {
	src := make([]byte, 640*3)
	for i := range src { src[i] = byte(i * 7) }
	a := pilAxis(640, 640, 341, 58, 282)
	dst := make([]byte, 3*224)
	for _, f := range []struct{ name string; fn func([]byte, []byte, *axis) }{{"old", horizontal3old}, {"new", horizontal3}, {"unroll", horizontal3u}, {"old", horizontal3old}, {"new", horizontal3}, {"unroll", horizontal3u}} {
		b.Run(f.name, func(b *testing.B) {
			runtime.LockOSThread(); defer runtime.UnlockOSThread()
			c0 := cpuNow(); n := 0
			for b.Loop() {
				for range 400 { f.fn(dst, src, a) }
				n++
			}
			b.ReportMetric(float64(cpuNow()-c0)/float64(n), "cpu-ns/op")
		})
	}
}
