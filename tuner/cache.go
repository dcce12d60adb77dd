package tuner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/jsonfile"
)

// The curves are cached on disk, one JSON file per key, so that a model loaded again on the
// same machine starts at once: measuring takes seconds.

// curveKey identifies a curve: the model file's bytes, device, threads and input shapes.
func curveKey(modelPath, device string, threads int, sample *handlers.Sample, withSingle bool) (string, error) {
	f, err := os.Open(modelPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	fmt.Fprintf(h, "|%s|%d|%v", device, threads, withSingle)
	for _, t := range sample.Tensors {
		fmt.Fprintf(h, "|%v%v", t.DType, t.Shape)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// cacheDir is the directory of the cache: dir when set, else the user's cache directory,
// else the temporary one.
func cacheDir(dir string) string {
	if dir != "" {
		return dir
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "torchd")
	}
	return filepath.Join(os.TempDir(), "torchd-cache")
}

// curvePath is the cache file of the curve with the given key.
func curvePath(dir, key string) string { return filepath.Join(cacheDir(dir), "curves", key+".json") }

// readCurve reads a cached curve; false when there is none, or it cannot be read, or it is
// empty.
func readCurve(path string) (curve, bool) {
	var c curve
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &c) != nil || len(c.Points) == 0 {
		return curve{}, false
	}
	return c, true
}

// cachedCurve reads the curve cached at path, or measures it and caches it there; source
// says which ("cache" or "measured"). what names the curve in errors and the log.
func cachedCurve(path, model, what string, log *slog.Logger, measure func() (*curve, error)) (curve, string, error) {
	if c, ok := readCurve(path); ok {
		return c, "cache", nil
	}
	c, err := measure()
	if err != nil {
		return curve{}, "", fmt.Errorf("model %s: measuring the %s: %v", model, what, err)
	}
	if err := jsonfile.Write(path, c); err != nil {
		log.Warn(what+" not cached", "model", model, "err", err)
	}
	return *c, "measured", nil
}
