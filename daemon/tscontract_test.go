package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/archive"
)

// An archive made for TorchServe's own text_classifier (daemon/url.go decides the handler) (a torchtext source_vocab.pt, no
// vocab.txt) runs that handler in a handler process, whether the archive names it or the
// registration does; torchd's BERT-style handler would refuse it for want of a vocab.txt.
func TestTorchServeTextClassifierRoutes(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "source_vocab.pt")
	if err := os.WriteFile(vocab, []byte("a torchtext vocabulary, read by TorchServe's handler only"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tc_manifest", "tc_param"} {
		handler := "text_classifier"
		if name == "tc_param" {
			handler = "tensor" // the registration's handler= names text_classifier
		}
		if _, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: filepath.Join(zooDir, "textcls", "model.pt"),
			Handler: handler, ExtraFiles: []string{vocab}, ExportPath: dir}); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--allowed-urls", "file://.*", "--python", venvPython(t))
	for name, query := range map[string]string{"tc_manifest": "", "tc_param": "&handler=text_classifier"} {
		r := do(t, "POST", s.mgmt+"/models?initial_workers=0&url=file://"+filepath.Join(dir, name+".mar")+query, "", nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		var desc []struct{ Handler, Runtime string }
		do(t, "GET", s.mgmt+"/models/"+name, "", nil).json(t, &desc)
		if len(desc) != 1 || desc[0].Handler != "python" || desc[0].Runtime != "python" {
			t.Errorf("%s: %+v, want TorchServe's handler in a handler process", name, desc)
		}
	}
}
