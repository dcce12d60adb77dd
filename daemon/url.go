package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
)

// registerModel opens the archive a registration names and loads it as a model version. It answers 409 for a version already registered, 400 for
// an archive or handler torchd cannot serve, and 500 when the model fails to load or warm up;
// a failed registration leaves nothing behind.
func (d *Daemon) registerModel(req RegisterRequest) (*ModelVersion, error) {
	entry, python := archive.PythonEntry(req.Handler)
	// TorchServe lets handler= override the archive's and hands a name it does not know to
	// its worker, as a module to import. So does torchd: the name runs in a handler process,
	// whose start fails (500) when it cannot be imported, at registration, or, for a model
	// registered with 0 workers, when workers are added.
	unknown := req.Handler != "" && !archive.IsHandlerName(req.Handler) && !python
	if unknown {
		entry, python = req.Handler, true
	}
	path, cleanup, err := d.resolveURL(req.URL)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var opts []archive.Option
	switch {
	case python:
		opts = append(opts, archive.WithHandler(archive.HandlerPython))
	case req.Handler != "":
		opts = append(opts, archive.WithHandler(req.Handler))
	}
	am, err := archive.Open(path, opts...)
	if err != nil {
		return nil, frontend.APIErrorf(http.StatusBadRequest, "ModelException", "%s: %v", req.URL, err)
	}
	// A registration parameter overrides the archive's own setting, the handler included.
	// A Python one runs in handler processes, and fails there, with 500, if the archive does
	// not hold it.
	switch {
	case python:
		am.Config.Handler, am.PythonHandler = archive.HandlerPython, entry
	case req.Handler == archive.HandlerPython:
		if err := am.RunManifestHandler(); err != nil {
			am.Close()
			return nil, frontend.APIErrorf(http.StatusBadRequest, "ModelException", "%s: %v", req.URL, err)
		}
	case am.ForTorchServes(req.Handler):
		am.Config.Handler, am.PythonHandler = archive.HandlerPython, req.Handler
	case req.Handler != "":
		am.Config.Handler = req.Handler
	}
	name := req.Name
	if name == "" {
		name = am.Name
	}
	v, err := d.Registry.Add(name, am.Version, req, am)
	if unknown && errors.Is(err, core.ErrLoadFailed) {
		return nil, frontend.APIErrorf(http.StatusInternalServerError, "InternalServerException",
			"handler %q given at registration does not exist: torchd has %s, and TorchServe's worker could not load it: %v",
			req.Handler, strings.Join(archive.HandlerNames(), ", "), err)
	}
	return v, err
}

// resolveURL maps a registration url to a local path, and returns what removes a downloaded
// copy once the archive is opened (extracted), a no-op otherwise. A plain name or relative path is looked
// up in the model store and may not leave it; file:// and http(s):// URLs must match
// allowed_urls, whose default allows the model store only.
func (d *Daemon) resolveURL(raw string) (string, func(), error) {
	none := func() {}
	if raw == "" {
		return "", none, frontend.APIErrorf(http.StatusBadRequest, "BadRequestException", "Parameter url is required.")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		p, err := d.storePath(raw)
		return p, none, err
	}
	// allowed_urls is matched against the URL as it will be used: decoded (%2e%2e is ..) and
	// cleaned, so that file:///allowed/../elsewhere cannot pass for file:///allowed/..., and
	// for file:// also against the path with symbolic links resolved. Whether a path was
	// refused or does not exist gets one message, so that registration cannot be used to
	// probe the file system.
	refused := frontend.APIErrorf(http.StatusBadRequest, "ModelException", "url %s is not allowed or not found: it must be in the model store or match allowed_urls", raw)
	switch u.Scheme {
	case "file":
		clean := filepath.Clean("/" + u.Path)
		if !d.allowed("file://" + clean) {
			return "", none, refused
		}
		real, err := filepath.EvalSymlinks(clean)
		if err != nil || !d.allowed("file://"+real) {
			return "", none, refused
		}
		return real, none, nil
	case "http", "https":
		c := *u
		c.Path, c.RawPath, c.Fragment, c.RawFragment = path.Clean("/"+u.Path), "", "", ""
		if u.Path == "" {
			c.Path = ""
		}
		clean := c.String()
		if !d.allowed(clean) {
			return "", none, refused
		}
		// TorchServe downloads into the model store and refuses, before downloading, a URL
		// whose file name is already there (500); torchd downloads elsewhere but answers alike.
		if name := path.Base(c.Path); name != "/" && name != "." && d.cfg.ModelStore != "" {
			if _, err := os.Stat(filepath.Join(d.cfg.ModelStore, name)); err == nil {
				return "", none, frontend.APIErrorf(http.StatusInternalServerError, "FileAlreadyExistsException",
					"%s: an archive of that name is already in the model store (register it by its name, or rename the download)", name)
			}
		}
		p, err := d.download(clean, &c)
		if err != nil {
			return "", none, err
		}
		return p, func() { os.RemoveAll(filepath.Dir(p)) }, nil
	}
	if !d.allowed(raw) {
		return "", none, refused
	}
	return "", none, frontend.APIErrorf(http.StatusBadRequest, "ModelException", "url scheme %q is not supported (file, http, https)", u.Scheme)
}

func (d *Daemon) storePath(name string) (string, error) {
	if strings.Contains(name, "..") {
		// TorchServe answers 404 for a ".." in the URL.
		return "", frontend.APIErrorf(http.StatusNotFound, "ModelNotFoundException", "Model not found in model store: %s", name)
	}
	store, err := filepath.Abs(d.cfg.ModelStore)
	if err != nil {
		return "", err
	}
	p := filepath.Join(store, filepath.Clean("/"+name))
	if _, err := os.Stat(p); err != nil {
		return "", frontend.APIErrorf(http.StatusNotFound, "ModelNotFoundException", "Model not found in model store: %s", name)
	}
	return p, nil
}

func (d *Daemon) allowed(raw string) bool {
	for _, pat := range d.cfg.AllowedURLs {
		if re, err := regexp.Compile("^(?:" + pat + ")$"); err == nil && re.MatchString(raw) {
			return true
		}
	}
	return false
}

// download fetches an archive into the model store's download directory, size- and
// time-limited, keeping the URL's file name (its extension tells the format).
func (d *Daemon) download(raw string, u *url.URL) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.DownloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return "", frontend.APIErrorf(http.StatusBadRequest, "DownloadArchiveException", "Failed to download archive from: %s", raw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", frontend.APIErrorf(http.StatusBadRequest, "DownloadArchiveException", "Failed to download archive from: %s: %v", raw, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", frontend.APIErrorf(http.StatusBadRequest, "DownloadArchiveException", "Failed to download archive from: %s: HTTP %d", raw, resp.StatusCode)
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("torchd-%d-download-*", os.Getpid()))
	if err != nil {
		return "", err
	}
	base := filepath.Base(u.Path)
	if base == "/" || base == "." {
		base = "model.mar"
	}
	p := filepath.Join(dir, base)
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	limit := d.cfg.MaxDownloadSize
	if resp.ContentLength > limit {
		f.Close()
		os.RemoveAll(dir)
		return "", frontend.APIErrorf(http.StatusBadRequest, "DownloadArchiveException", "Failed to download archive from: %s: its Content-Length %d is over max_download_size (%d bytes)", raw, resp.ContentLength, limit)
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, limit+1))
	f.Close()
	switch {
	case err != nil && ctx.Err() != nil:
		err = fmt.Errorf("download_timeout (%v) passed after %d bytes", d.cfg.DownloadTimeout, n)
	case err == nil && n > limit:
		err = fmt.Errorf("larger than max_download_size (%d bytes)", limit)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", frontend.APIErrorf(http.StatusBadRequest, "DownloadArchiveException", "Failed to download archive from: %s: %v", raw, err)
	}
	return p, nil
}
