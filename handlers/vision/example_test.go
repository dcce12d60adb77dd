package vision_test

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"

	"github.com/torchd/torchd/handlers/vision"
)

func ExampleTransform_Apply() {
	// A 320x240 mid-gray PNG, standing in for a request body.
	m := image.NewGray(image.Rect(0, 0, 320, 240))
	for i := range m.Pix {
		m.Pix[i] = 128
	}
	var body bytes.Buffer
	png.Encode(&body, m)

	t := vision.DefaultTransform() // Resize(256), CenterCrop(224), ImageNet mean/std
	c, h, w := t.OutputShape()
	dst := make([]float32, c*h*w) // one batch row; usually a slice of the batch tensor
	if err := t.Apply(body.Bytes(), dst); err != nil {
		panic(err)
	}
	fmt.Println(c, h, w)
	fmt.Printf("R %.4f G %.4f B %.4f\n", dst[0], dst[h*w], dst[2*h*w])
	// Output:
	// 3 224 224
	// R 0.0741 G 0.2052 B 0.4265
}

func ExampleTransform_Apply_badInput() {
	t := vision.DefaultTransform()
	dst := make([]float32, 3*224*224)
	err := t.Apply([]byte("GIF89a\xff\xff\xff\xff\x00\x00\x00;"), dst)
	if errors.Is(err, vision.ErrBadImage) {
		fmt.Println("400:", err)
	}
	// Output:
	// 400: vision: bad image: too large: gif is 65535x65535, over the limit of 40000000 pixels
}
