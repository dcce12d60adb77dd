package torchserve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// fuzzMaxBody is max_request_size in the fuzz target.
const fuzzMaxBody = 1 << 16

// payloadsOf reads a request with this Content-Type, Content-Encoding and body as the
// server does (fasthttp's reader, which pre-parses multipart forms, then requestPayloads).
// ok is false when fasthttp refuses the request before any handler would run; read is the
// body as fasthttp read it (a Content-Type holding a line break can end the headers early).
func payloadsOf(contentType, encoding string, body []byte) (ctx *fasthttp.RequestCtx, read []byte, payloads [][]byte, names []string, err error, ok bool) {
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n", contentType, len(body))
	if encoding != "" {
		fmt.Fprintf(&raw, "Content-Encoding: %s\r\n", encoding)
	}
	raw.WriteString("\r\n")
	raw.Write(body)
	ctx = new(fasthttp.RequestCtx)
	if ctx.Request.ReadLimitBody(bufio.NewReader(&raw), fuzzMaxBody) != nil {
		return ctx, nil, nil, nil, nil, false
	}
	read = bytes.Clone(ctx.Request.Body())
	req, err := requestPayloads(ctx, fuzzMaxBody)
	if err != nil {
		return ctx, read, nil, nil, err, true
	}
	for _, p := range req.Inputs {
		payloads = append(payloads, p.Data)
		names = append(names, p.Name)
	}
	return ctx, read, payloads, names, nil, true
}

// FuzzRequestPayloads feeds the inference API's request decoding (raw bodies, multipart
// forms, gzipped multipart forms and raw bodies) arbitrary Content-Types, encodings and bodies. It must not
// panic; a failure must say what was wrong, a gzipped form that expands past the body limit
// must be ErrBodyTooLarge, and a success must give inputs in name order that no longer
// alias fasthttp's buffers, which are reused for the next request on the connection. The
// seed corpus is in testdata/fuzz/FuzzRequestPayloads.
//
//	go test -run='^$' -fuzz=FuzzRequestPayloads -fuzztime=2m ./daemon/
func FuzzRequestPayloads(f *testing.F) {
	for _, s := range payloadSeeds(f) {
		f.Add(s.contentType, s.encoding, s.body)
	}
	f.Fuzz(func(t *testing.T, contentType, encoding string, body []byte) {
		ctx, read, payloads, names, err, ok := payloadsOf(contentType, encoding, body)
		defer ctx.Request.RemoveMultipartFormFiles()
		if !ok {
			return
		}
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "multipart") && !strings.Contains(msg, "Content-Encoding") && !strings.Contains(msg, " body") {
				t.Fatalf("error that does not say what was wrong: %v", err)
			}
			return
		}
		multipart := strings.HasPrefix(string(ctx.Request.Header.ContentType()), "multipart/form-data")
		// A raw body with a Content-Encoding is its decompressed bytes; any other is read as sent.
		encoded := len(ctx.Request.Header.Peek("Content-Encoding")) > 0
		if !multipart && (len(payloads) != 1 || !encoded && !bytes.Equal(payloads[0], read)) {
			t.Fatalf("a raw body of %d bytes became %d inputs", len(read), len(payloads))
		}
		if len(payloads) == 0 {
			t.Fatal("success with no input")
		}
		if !slices.IsSorted(names) {
			t.Fatalf("inputs not in name order: %q", names)
		}
		total := 0
		kept := make([][]byte, len(payloads))
		for i, p := range payloads {
			total += len(p)
			kept[i] = bytes.Clone(p)
		}
		if total > fuzzMaxBody {
			t.Fatalf("%d bytes of inputs from a limit of %d", total, fuzzMaxBody)
		}
		// A raw body's input is fasthttp's body itself, which stays the request's until it is
		// answered (one answered 504 takes it first: TestTimedOutRequestKeepsItsBody). A form's
		// inputs are copies: the connection's next request reuses the buffers, and they must
		// not change.
		if !multipart {
			return
		}
		ctx.Request.RemoveMultipartFormFiles()
		ctx.Request.Reset()
		ctx.Request.SetBody(bytes.Repeat([]byte{0xAA}, len(body)+64))
		for i, p := range payloads {
			if !bytes.Equal(p, kept[i]) {
				t.Fatalf("input %d changed when the request buffer was reused", i)
			}
		}
	})
}

type payloadSeed struct {
	name, contentType, encoding string
	body                        []byte
}

func gzipBytes(tb testing.TB, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// payloadSeeds are the fuzz target's starting inputs: each request form the inference API
// takes, and the broken ones of backends/libtorch/hostile_test.go.
func payloadSeeds(tb testing.TB) []payloadSeed {
	form := "--XB\r\nContent-Disposition: form-data; name=\"b\"; filename=\"b.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n\r\n" +
		"--XB\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nsome text\r\n--XB--\r\n"
	return []payloadSeed{
		{"raw-json", "application/json", "", []byte(`{"data": [1, 2], "shape": [2]}`)},
		{"raw-png", "image/png", "", []byte("\x89PNG\r\n\x1a\n")},
		{"multipart-file-and-field", "multipart/form-data; boundary=XB", "", []byte(form)},
		{"multipart-gzip", "multipart/form-data; boundary=XB", "gzip", gzipBytes(tb, []byte(form))},
		{"multipart-gzip-bomb", "multipart/form-data; boundary=XB", "gzip", gzipBytes(tb, []byte(strings.Replace(form, "some text", strings.Repeat("0", 4*fuzzMaxBody), 1)))},
		{"multipart-no-boundary", "multipart/form-data", "", []byte(form)},
		{"multipart-truncated", "multipart/form-data; boundary=XB", "", []byte(form[:len(form)-10])},
		{"multipart-bad-part-header", "multipart/form-data; boundary=XB", "", []byte("--XB\r\nno colon\r\n\r\nx\r\n--XB--\r\n")},
		{"multipart-empty", "multipart/form-data; boundary=XB", "", []byte("--XB--\r\n")},
		{"multipart-quoted-boundary", `multipart/form-data; boundary="X B"`, "", []byte(strings.ReplaceAll(form, "XB", "X B"))},
		{"multipart-deflate", "multipart/form-data; boundary=XB", "deflate", []byte(form)},
	}
}

// The gzip bomb seed is refused with ErrBodyTooLarge, which the server answers 413.
func TestRequestPayloadsGzipBomb(t *testing.T) {
	for _, s := range payloadSeeds(t) {
		if s.name != "multipart-gzip-bomb" {
			continue
		}
		_, _, _, _, err, ok := payloadsOf(s.contentType, s.encoding, s.body)
		if !ok || !errors.Is(err, fasthttp.ErrBodyTooLarge) || !strings.Contains(err.Error(), "decompresses to more than max_request_size") {
			t.Fatalf("gzip bomb: %v (read %v)", err, ok)
		}
	}
}
