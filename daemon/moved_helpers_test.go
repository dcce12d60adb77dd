package daemon_test

// Helpers of tests that moved out of daemon/ (#63) which the tests kept here still use:
// body_test.go runs a daemon in process, and several send with post and timed.

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// The digits AOTInductor package behind the tensor handler, which the package attacks
// register (the zoo's packages are backends/libtorch's tests).
func init() {
	storePackages = append(storePackages, storeArchive{"digits_pt2", "digits", "digits_tensor", "1.0", "pt2"})
}

func repeatJSON(v string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + "]"
}

// post sends body without failing the test on a transport error (the caller may be a
// goroutine); a transport error comes back as status 0 with the error as the body.
func post(url, contentType string, body []byte, header ...string) response {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return response{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
