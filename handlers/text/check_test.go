package text

import (
	"strings"
	"testing"
)

// Check refuses ids that Encode never makes: outside the vocabulary, or too many.
func TestCheck(t *testing.T) {
	w := newWordPiece(t, Options{MaxLength: 4}, "[UNK]", "[CLS]", "[SEP]", "a")
	if err := w.Check(w.Encode("a a a a a")); err != nil {
		t.Fatalf("Encode's own ids: %v", err)
	}
	for _, c := range []struct {
		ids  []int64
		want string
	}{
		{[]int64{1, 5, 2}, "id 5 at position 1 is outside the vocabulary of 5 tokens"},
		{[]int64{1, -1, 2}, "id -1 at position 1"},
		{[]int64{1, 3, 3, 3, 2}, "5 ids exceed the maximum length of 4"},
	} {
		if err := w.Check(c.ids); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v) = %v, want %q", c.ids, err, c.want)
		}
	}
}
