package daemon_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The web page in a real browser: headless Chromium, driven over the W3C WebDriver protocol
// by chromedriver (Debian's chromium and chromium-driver, which make setup installs), with
// the small client below: a few JSON calls over HTTP, so the test needs no Go dependency.
// Screenshots go to build/ui-screenshots/ (TORCHD_UI_SCREENSHOTS overrides).

// TestWebPageInChromium serves digits and the captioner, opens the page, uploads a held-out
// digit and a held-out scene through the file input, and reads the top-1 digit and the
// caption off the page. It also checks that the management actions appear when the
// management port allows the page's origin, that every control has a label, that the live
// view shows the requests, and that with token authorization the page asks for the
// inference key and works with it.
func TestWebPageInChromium(t *testing.T) {
	chromium, driver := browserBinaries(t)
	port := freePort(t)
	origin := "http://127.0.0.1:" + port
	s := startServer(t, "--inference-address", "127.0.0.1:"+port, "--models", "digits=digits.mar,captioner=captioner.mar",
		"--management-allowed-origins", origin)
	s.waitHealthy(t)
	shots := os.Getenv("TORCHD_UI_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join("..", "build", "ui-screenshots")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	digit, label := digitTheModelGets(t, s)
	scene, caption := sceneTheModelGets(t, s)

	b := startBrowser(t, driver, chromium)
	b.post("/url", map[string]any{"url": origin + "/"})
	b.waitJS(`return ["digits/1.0", "captioner/1.0"].every(m =>
		document.querySelector('#models tr[data-model="' + m + '"] .state')?.textContent === "READY")`)
	// The origin is allowed and no key is needed, so the probe succeeds and the actions show.
	b.waitJS(`return !document.querySelector("#management").hidden &&
		!!document.querySelector('#models tr[data-model="digits/1.0"] button[aria-label^="Unregister"]')`)

	b.click(`button[data-try="digits/1.0"]`)
	b.sendKeys("#file-input", digit)
	got := b.waitJS(`return document.querySelector('#topk li[data-rank="1"]')?.dataset.label`)
	if got != label {
		t.Errorf("top-1 on the page: %q, want %q (%s)", got, label, filepath.Base(digit))
	}
	if lat := b.js(`return document.querySelector("#latency").dataset.ms`); lat == "" {
		t.Error("no latency shown")
	}
	if b.js(`return String(document.querySelector("#preview").hidden || !document.querySelector("#preview").complete)`) != "false" {
		t.Error("no preview of the uploaded image")
	}
	b.screenshot(filepath.Join(shots, "digits.png"))

	b.click(`button[data-try="captioner/1.0"]`)
	b.sendKeys("#file-input", scene)
	if got := b.waitJS(`return document.querySelector("#caption")?.textContent`); got != caption {
		t.Errorf("caption on the page: %q, want %q (%s)", got, caption, filepath.Base(scene))
	}
	b.screenshot(filepath.Join(shots, "captioner.png"))

	// Accessibility: every control has a label (or an aria-label), every button a name.
	if unlabeled := b.js(`return [...document.querySelectorAll("input, select, textarea, button")]
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !e.textContent.trim())
		.map(e => e.outerHTML.slice(0, 80)).join("\n")`); unlabeled != "" {
		t.Errorf("controls without a label:\n%s", unlabeled)
	}

	// Keyboard: Tab from the top goes through the skip link, the model select and the file
	// input (hidden visually, not from the keyboard), among the rest.
	b.js(`document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute("tabindex"); return ""`)
	var order []string
	for range 30 {
		b.post("/actions", map[string]any{"actions": []any{map[string]any{"type": "key", "id": "keyboard",
			"actions": []any{map[string]any{"type": "keyDown", "value": "\uE004"}, map[string]any{"type": "keyUp", "value": "\uE004"}}}}})
		order = append(order, b.js(`const e = document.activeElement; return e.id || e.getAttribute("aria-label") || e.textContent.trim()`))
	}
	b.call("DELETE", "/actions", nil)
	for _, want := range []string{"Skip to “Try a model”", "Try digits 1.0", "register-url", "try-model", "file-input"} {
		if !slices.Contains(order, want) {
			t.Errorf("Tab does not reach %q; it goes %q", want, order)
		}
	}
	if order[0] != "Skip to “Try a model”" {
		t.Errorf("the first Tab stop is %q", order[0])
	}

	// Some load, then the live view shows it: a non-zero request rate for digits.
	img, _ := os.ReadFile(digit)
	forEach(64, 8, func(int) { do(t, "POST", s.inf+"/predictions/digits", "image/png", img) })
	rps := b.waitJS(`const b = document.querySelector('#live article[data-model="digits/1.0"] figure[data-metric="rps"] b');
		return b && parseFloat(b.textContent) > 0 ? b.textContent : ""`)
	t.Logf("live view: digits at %s requests/s", rps)
	if d, err := time.ParseDuration(os.Getenv("TORCHD_UI_DEMO")); err == nil {
		demoLoad(t, s, d, img, scene)
	}
	b.js(`document.querySelector("#try-model").focus(); return ""`)
	height, _ := strconv.Atoi(b.js(`return String(document.documentElement.scrollHeight + outerHeight - innerHeight)`))
	b.post("/window/rect", map[string]any{"width": 1280, "height": height})
	b.screenshot(filepath.Join(shots, "page.png"))

	// With token authorization the page loads without a key, asks for the inference key,
	// keeps it for the tab and sends it: the prediction works, and with no management key
	// (and no allowed origin) the management actions stay hidden.
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	sk := startServer(t, "--enable-token-authorization", "--key-file", keyFile, "--models", "digits=digits.mar")
	sk.waitHealthy(t)
	k := readKeys(t, keyFile)
	b.post("/url", map[string]any{"url": sk.inf + "/"})
	b.waitJS(`return !document.querySelector("#keys").hidden`)
	b.sendKeys("#inference-key", k.Inference.Key)
	b.click(`#keys-form button[type=submit]`)
	b.waitJS(`return document.querySelector('#models tr[data-model="digits/1.0"] .state')?.textContent === "READY"`)
	b.click(`button[data-try="digits/1.0"]`)
	b.sendKeys("#file-input", digit)
	if got := b.waitJS(`return document.querySelector('#topk li[data-rank="1"]')?.dataset.label`); got != label {
		t.Errorf("with token authorization, top-1 on the page: %q, want %q", got, label)
	}
	if b.js(`return String(document.querySelector("#management").hidden && !document.querySelector("button[aria-label^=Unregister]"))`) != "true" {
		t.Error("management actions shown without an allowed origin")
	}
	// The live view, fetched with the key too, draws the request just made.
	b.waitJS(`return document.querySelector('#live article[data-model="digits/1.0"] figure[data-metric="rps"] svg polyline') !== null`)
	b.screenshot(filepath.Join(shots, "token-authorization.png"))
}

// demoLoad sends a load that rises and falls to both models for d, so that page.png shows
// the live view at work: TORCHD_UI_DEMO=40s makes the README's docs/ui.png.
func demoLoad(t *testing.T, s *server, d time.Duration, digit []byte, scenePath string) {
	scene, _ := os.ReadFile(scenePath)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		left := time.Until(end).Seconds() / d.Seconds() // 1 → 0
		clients := 1 + int(15*math.Sin(math.Pi*left))
		forEach(40*clients, clients, func(i int) {
			if i%8 == 0 {
				do(t, "POST", s.inf+"/predictions/captioner", "image/png", scene)
			} else {
				do(t, "POST", s.inf+"/predictions/digits", "image/png", digit)
			}
		})
	}
	time.Sleep(2500 * time.Millisecond) // the page's next poll
}

// digitTheModelGets returns a held-out digit PNG, 0000_2.png unless the model gets it wrong,
// and its label: the test is of the page, not of the model's accuracy.
func digitTheModelGets(t *testing.T, s *server) (path, label string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(zooDir, "digits", "heldout"))
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".png") {
			continue
		}
		want := strings.TrimSuffix(strings.SplitN(e.Name(), "_", 2)[1], ".png")
		img, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		var probs map[string]float64
		do(t, "POST", s.inf+"/predictions/digits", "image/png", img).json(t, &probs)
		best, top := "", -1.0
		for k, p := range probs {
			if p > top {
				best, top = k, p
			}
		}
		if best == want {
			return filepath.Join(dir, e.Name()), want
		}
	}
	t.Fatal("the digits model gets no held-out digit right")
	return "", ""
}

// sceneTheModelGets returns the first held-out scene the captioner captions right, and the
// caption.
func sceneTheModelGets(t *testing.T, s *server) (path, caption string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(zooDir, "captioner", "heldout"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "captions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("%04d.png", i)
		img, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if captionOf(t, do(t, "POST", s.inf+"/predictions/captioner", "image/png", img)) == want[name] {
			return filepath.Join(dir, name), want[name]
		}
	}
	t.Fatal("the captioner gets none of the first 20 held-out scenes right")
	return "", ""
}

// browserBinaries finds Chromium and chromedriver, or skips the test.
func browserBinaries(t *testing.T) (chromium, driver string) {
	t.Helper()
	chromium = os.Getenv("TORCHD_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if chromium != "" {
			break
		}
		chromium, _ = exec.LookPath(name)
	}
	driver, _ = exec.LookPath("chromedriver")
	if chromium == "" || driver == "" {
		t.Skip("browser test skipped: Chromium or chromedriver is not installed " +
			"(make setup installs Debian's chromium and chromium-driver with apt)")
	}
	return chromium, driver
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// browser is a WebDriver session.
type browser struct {
	t       *testing.T
	base    string // http://127.0.0.1:port/session/id
	timeout time.Duration
}

// startBrowser runs chromedriver and opens a headless Chromium session; both end with t.
func startBrowser(t *testing.T, driver, chromium string) *browser {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(driver, "--port="+port)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	root := "http://127.0.0.1:" + port
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(root + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not start: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	b := &browser{t: t, base: root, timeout: 20 * time.Second}
	args := []string{"--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--window-size=1280,1000", "--user-data-dir=" + t.TempDir(), "--lang=en-US"}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox") // Chromium's sandbox refuses to run as root
	}
	v := b.call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName":        "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": args},
	}}})
	var sess struct {
		SessionID    string         `json:"sessionId"`
		Capabilities map[string]any `json:"capabilities"`
	}
	if err := json.Unmarshal(v, &sess); err != nil || sess.SessionID == "" {
		t.Fatalf("new session: %s %v", v, err)
	}
	t.Logf("browser: %v %v", sess.Capabilities["browserName"], sess.Capabilities["browserVersion"])
	b.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { b.call("DELETE", "", nil) })
	return b
}

// call sends one WebDriver command and returns its "value"; an error fails the test.
func (b *browser) call(method, path string, body any) json.RawMessage {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		b.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != 200 {
		b.t.Fatalf("webdriver %s %s: %d %.2000s", method, path, resp.StatusCode, raw)
	}
	return r.Value
}

func (b *browser) post(path string, body any) json.RawMessage {
	b.t.Helper()
	return b.call("POST", path, body)
}

// js runs a script's body and returns its result as a string ("" for null).
func (b *browser) js(script string) string {
	b.t.Helper()
	v := b.post("/execute/sync", map[string]any{"script": script, "args": []any{}})
	var s *string
	if json.Unmarshal(v, &s) != nil {
		var x any
		json.Unmarshal(v, &x)
		return fmt.Sprint(x)
	}
	if s == nil {
		return ""
	}
	return *s
}

// waitJS polls a script until it returns something other than "", null, false or undefined.
func (b *browser) waitJS(script string) string {
	b.t.Helper()
	deadline := time.Now().Add(b.timeout)
	for {
		if v := b.js(script); v != "" && v != "false" && v != "<nil>" {
			return v
		}
		if time.Now().After(deadline) {
			b.screenshot(filepath.Join(b.t.TempDir(), "timeout.png"))
			b.t.Fatalf("timed out after %v waiting for\n%s\npage status: %s; result: %q", b.timeout, script,
				b.js(`return document.querySelector("#server-status").textContent`), b.js(`return document.querySelector("#result").textContent`))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) find(css string) string {
	b.t.Helper()
	v := b.post("/element", map[string]any{"using": "css selector", "value": css})
	var ref map[string]string
	json.Unmarshal(v, &ref)
	for _, id := range ref {
		return id
	}
	b.t.Fatalf("no element %s: %s", css, v)
	return ""
}

func (b *browser) click(css string) {
	b.t.Helper()
	b.post("/element/"+b.find(css)+"/click", map[string]any{})
}

// sendKeys types text into an element; into a file input, it chooses that file.
func (b *browser) sendKeys(css, text string) {
	b.t.Helper()
	b.post("/element/"+b.find(css)+"/value", map[string]any{"text": text})
}

func (b *browser) screenshot(path string) {
	b.t.Helper()
	var s string
	json.Unmarshal(b.call("GET", "/screenshot", nil), &s)
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

func captionOf(t testing.TB, r response) string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var c struct {
		Caption *string `json:"caption"`
	}
	r.json(t, &c)
	if c.Caption == nil {
		t.Fatalf("no caption in %s", r.body)
	}
	return *c.Caption
}
