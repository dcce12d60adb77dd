package handlerproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A requirements file that includes a file outside the archive (-r /etc/passwd) is refused
// before pip runs, and the error never quotes what that file holds.
func TestRequirementsIncludeOutside(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("root:x:0:0:the secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, files, line string }{
		{"absolute", "-r /etc/passwd", "requirements.txt line 1"},
		{"joined", "-r" + outside, "requirements.txt line 1"},
		{"long form", "numpy\n--requirement=" + outside, "requirements.txt line 2"},
		{"constraint", "-c " + outside, "requirements.txt line 1"},
		{"relative", "-r ../../" + filepath.Base(filepath.Dir(outside)) + "/secret.txt", "requirements.txt line 1"},
		{"nested", "-r more.txt", "more.txt line 1"},
		{"url", "-r https://example.com/r.txt", "not a URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "more.txt"), []byte("--constraint "+outside+"\n"), 0o644)
			file := filepath.Join(dir, "requirements.txt")
			os.WriteFile(file, []byte(c.files+"\n"), 0o644)
			err := Requirements{Python: "/nonexistent/python", File: file, Target: DepsDir(dir)}.Install()
			if err == nil || !strings.Contains(err.Error(), c.line) {
				t.Fatalf("err = %v; want the refusal at %s", err, c.line)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "root:") {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
	}
	// A file of the archive may be included: the check passes it on to pip.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "more.txt"), []byte("# nothing\n"), 0o644)
	if err := checkIncludes(writeFile(t, dir, "requirements.txt", "-r more.txt\n-rmore.txt\n"), dir, 0); err != nil {
		t.Errorf("an archive's own file: %v", err)
	}
}

func writeFile(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
