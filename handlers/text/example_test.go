package text_test

import (
	"fmt"
	"strings"

	"github.com/torchd/torchd/handlers/text"
)

func ExampleWordPiece() {
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\nwant\n##want\n##ed\nwa\nun\nrunn\n##ing\n,\n"
	w, err := text.Read(strings.NewReader(vocab), text.Options{Lowercase: true, MaxLength: 8})
	if err != nil {
		panic(err)
	}
	fmt.Println(w.Tokenize("UNwant\u00e9d,running"))
	fmt.Println(w.Encode("UNwant\u00e9d,running"))
	ids, mask, width := w.Batch([][]int64{w.Encode("running"), w.Encode("unwanted")})
	fmt.Println(ids, mask, width)
	// Output:
	// [un ##want ##ed , runn ##ing]
	// [2 8 5 6 11 9 10 3]
	// [2 9 10 3 0 2 8 5 6 3] [1 1 1 1 0 1 1 1 1 1] 5
}
