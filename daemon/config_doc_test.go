package daemon

//go:generate env TORCHD_WRITE_DOCS=1 go test -count=1 -run ^TestConfigurationDoc$ .

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	configDoc      = "../docs/guide/configuration.md"
	settingsBegin  = "<!-- settings: begin. Generated from daemon/config.go by `go generate ./daemon/`; do not edit. -->"
	settingsEnd    = "<!-- settings: end -->"
	settingsHeader = "| Key | Environment | Flag | Default | Per model | Meaning |\n|---|---|---|---|---|---|\n"
)

// settingsTable is the settings list as a Markdown table, in the list's order.
func settingsTable() string {
	var b strings.Builder
	b.WriteString(settingsHeader)
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "(empty)"
		}
		per := ""
		if s.model {
			per = "yes"
		}
		b.WriteString("| " + s.key + " | " + strings.Join(s.env, ", ") + " | --" + flagName(s.key) + " | " + cell(def) + " | " + per + " | " + cell(s.help) + " |\n")
	}
	return b.String()
}

// TestConfigurationDoc checks that docs/guide/configuration.md's table is the settings list;
// TORCHD_WRITE_DOCS=1 (go generate ./daemon/) writes it instead.
func TestConfigurationDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(configDoc))
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(b, []byte(settingsBegin)), bytes.Index(b, []byte(settingsEnd))
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q block", configDoc, settingsBegin, settingsEnd)
	}
	want := settingsBegin + "\n" + settingsTable() + settingsEnd
	if string(b[i:j+len(settingsEnd)]) == want {
		return
	}
	if os.Getenv("TORCHD_WRITE_DOCS") == "1" {
		out := append(append(append([]byte{}, b[:i]...), want...), b[j+len(settingsEnd):]...)
		if err := os.WriteFile(filepath.FromSlash(configDoc), out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", configDoc)
		return
	}
	t.Errorf("%s's settings table is not daemon/config.go's settings: run go generate ./daemon/", configDoc)
}
