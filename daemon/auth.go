package daemon

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

// Token authorization, as TorchServe's (docs/token_authorization_api.md there): three keys
// in a key file, one for the inference API, one for the management API, and an API key that
// only rotates the other two through GET /token?type=inference|management on the management
// port. Clients send "Authorization: Bearer <key>". A failure is 400 InvalidKeyException,
// TorchServe's status for it.
//
// The key file is read at start-up when it exists (so keys can be provisioned, say from a
// Kubernetes secret), else created with fresh random keys, mode 0600. Rotation rewrites it.
// Health checks (/ping, /v2/health/*) and the metrics port need no key, so that probes and
// scrapers work unchanged.

// keyFile is the key file's JSON, in TorchServe's shape.
type keyFile struct {
	Management keyEntry `json:"management"`
	Inference  keyEntry `json:"inference"`
	API        keyEntry `json:"API"`
}

type keyEntry struct {
	Key       string `json:"key"`
	Generated string `json:"generated,omitempty"`
}

type keyring struct {
	path string
	mu   sync.RWMutex
	keys keyFile
}

func newKey() string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// loadKeyring reads the key file, or creates it with new keys.
func loadKeyring(path string) (*keyring, bool, error) {
	k := &keyring{path: path}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &k.keys); err != nil {
			return nil, false, fmt.Errorf("key file %s: %v", path, err)
		}
		if k.keys.Management.Key == "" || k.keys.Inference.Key == "" || k.keys.API.Key == "" {
			return nil, false, fmt.Errorf("key file %s: management, inference and API keys are all required", path)
		}
		return k, false, nil
	case errors.Is(err, os.ErrNotExist):
		now := time.Now().UTC().Format(time.RFC3339)
		k.keys = keyFile{Management: keyEntry{newKey(), now}, Inference: keyEntry{newKey(), now}, API: keyEntry{newKey(), now}}
		return k, true, k.save()
	default:
		return nil, false, fmt.Errorf("key file: %v", err)
	}
}

// save writes the key file atomically, readable by its owner only.
func (k *keyring) save() error {
	b, err := json.MarshalIndent(k.keys, "", "  ")
	if err != nil {
		return err
	}
	tmp := k.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("key file: %v", err)
	}
	return os.Rename(tmp, k.path)
}

func (k *keyring) key(kind string) string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	switch kind {
	case "management":
		return k.keys.Management.Key
	case "inference":
		return k.keys.Inference.Key
	}
	return k.keys.API.Key
}

// allowed reports whether the request carries kind's key, compared in constant time.
func (k *keyring) allowed(ctx *fasthttp.RequestCtx, kind string) bool {
	h := string(ctx.Request.Header.Peek("Authorization"))
	got, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(k.key(kind))) == 1
}

// rotate replaces kind's key and rewrites the key file; the old key stops working at once.
func (k *keyring) rotate(kind string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := keyEntry{newKey(), time.Now().UTC().Format(time.RFC3339)}
	old := k.keys
	switch kind {
	case "management":
		k.keys.Management = e
	case "inference":
		k.keys.Inference = e
	default:
		return "", fmt.Errorf("type must be management or inference, got %q", kind)
	}
	if err := k.save(); err != nil {
		k.keys = old
		return "", err
	}
	return e.Key, nil
}

// authorize wraps a port's router with the key check. exempt lists paths that need no key.
// A refused key is answered in the shape of the API whose route it asked for (the router's
// Unauthorized).
func (d *Daemon) authorize(kind string, rt *frontend.Router, exempt func(path string) bool) fasthttp.RequestHandler {
	h := rt.Serve
	if d.keys == nil {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		path := string(ctx.Path())
		switch {
		case exempt(path):
		case kind == "management" && path == "/token":
			// Rotation takes the API key.
			if !d.keys.allowed(ctx, "API") {
				frontend.WriteTorchServeError(ctx, 400, "InvalidKeyException", "Token Authorization failed. Token either incorrect, expired, or not provided correctly: /token takes the API key")
				return
			}
		case !d.keys.allowed(ctx, keyFor(kind, path)):
			rt.Unauthorized(ctx, fmt.Sprintf("Token Authorization failed. Token either incorrect, expired, or not provided correctly: send the %s key as Authorization: Bearer <key>", keyFor(kind, path)))
			return
		}
		h(ctx)
	}
}

// keyFor is the key a path on kind's port takes: the repository API's load and unload are
// management actions on the inference port.
func keyFor(kind, path string) string {
	if kind == "inference" && repositoryControlPath(path) {
		return "management"
	}
	return kind
}

func healthPath(p string) bool {
	return p == "/ping" || p == "/v2/health/live" || p == "/v2/health/ready"
}

func noPath(string) bool { return false }

// token rotates a key: GET /token?type=management|inference, with the API key.
func (d *Daemon) token(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	if d.keys == nil {
		frontend.WriteTorchServeError(ctx, 400, "BadRequestException", "token authorization is off (enable_token_authorization = false)")
		return
	}
	key, err := d.keys.rotate(string(ctx.QueryArgs().Peek("type")))
	if err != nil {
		frontend.WriteTorchServeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	d.log.Info("key rotated", "type", string(ctx.QueryArgs().Peek("type")), "key_file", d.keys.path)
	frontend.WriteJSON(ctx, 200, map[string]string{"key": key})
}
