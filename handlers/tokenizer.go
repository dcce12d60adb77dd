package handlers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/torchd/torchd/handlers/text"
)

// loadTokenizer reads the text handlers' tokenizer from the archive: the tokenizer option's
// Hugging Face tokenizer.json; else, with neither option set, the archive's tokenizer.json
// when it has one (a Hugging Face export's, whose special tokens it follows); else the vocab
// option's vocab.txt (with lowercase and the Hugging Face pipeline as opts say).
func loadTokenizer(ctx Context, opts text.Options) (text.Tokenizer, error) {
	cfg := &ctx.Config
	tj, err := cfg.StringOption("tokenizer", "")
	if err != nil {
		return nil, err
	}
	_, vocabSet := cfg.Options["vocab"]
	vocab, err := cfg.StringOption("vocab", "vocab.txt")
	if err != nil {
		return nil, err
	}
	if tj == "" && !vocabSet && archiveHas(ctx.Dir, "tokenizer.json") {
		tj = "tokenizer.json"
	}
	if tj != "" {
		f, err := openArchiveFile(ctx, "tokenizer", tj)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		tok, err := text.ReadTokenizerJSON(f, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tj, err)
		}
		return tok, nil
	}
	f, err := openArchiveFile(ctx, "vocab", vocab)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := text.Read(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", vocab, err)
	}
	return tok, nil
}

func archiveHas(dir, name string) bool {
	f, err := os.OpenInRoot(dir, name)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// openArchiveFile opens the archive's file that option names. The archive is untrusted:
// OpenInRoot refuses a name that leaves it, by ".." or through a link. The error names the
// option and the file, never the system call.
func openArchiveFile(ctx Context, option, name string) (*os.File, error) {
	f, err := os.OpenInRoot(ctx.Dir, name)
	if err == nil {
		return f, nil
	}
	where := "option " + option
	if ctx.Config.File != "" {
		where = ctx.Config.File + ": " + where
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: the archive has no file %q: add it to the archive (torchd archive --extra-files), or name the right file", where, name)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%s: the archive's file %q cannot be read (permission denied)", where, name)
	default:
		// OpenInRoot's refusal of a path that leaves the root, and other failures.
		return nil, fmt.Errorf("%s: %q is not a file inside the archive", where, name)
	}
}
