package text_test

import (
	"strings"
	"testing"
)

// BenchmarkEncode is tokenization throughput in bytes of text: the held-out sentences (mostly
// ASCII), and a long accented paragraph, which takes the lower-case + NFD path for most words.
func BenchmarkEncode(b *testing.B) {
	w, h := loadZoo(b)
	var sentences []string
	for _, it := range h.Items {
		sentences = append(sentences, it.Text)
	}
	accented := strings.Repeat("Le café était très agréable, mais la crème brûlée était fade. ", 8)
	for _, c := range []struct {
		name  string
		texts []string
	}{{"heldout", sentences}, {"accented", []string{accented}}} {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for _, s := range c.texts {
				n += len(s)
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range c.texts {
					w.Encode(s)
				}
			}
		})
	}
}
