package soak_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/zootest"
	pb "github.com/torchd/torchd/proto/inference"
)

// soakHostileModels builds issue 50's hostile registrations into the store: a package whose
// library is cut to 20 kB, one with ../ entries, and an archive declaring a shape of 4 PB a
// sample. It returns their registration URLs.
func soakHostileModels(t *testing.T) []string {
	cut := zootest.EditedPackage(t, zooDir, func(name string, b []byte) []byte {
		if strings.HasSuffix(name, ".so") {
			return b[:20<<10]
		}
		return b
	})
	prefix := ""
	escape := zootest.EditedPackage(t, zooDir, func(name string, b []byte) []byte {
		prefix, _, _ = strings.Cut(name, "/")
		return b
	})
	escape = zootest.EditedPackage(t, zooDir, func(_ string, b []byte) []byte { return b }, [2]string{prefix + "/data/aotinductor/model/../../../../../../soak_escaped", "x"})
	tensor := "handler = \"tensor\"\n"
	huge := storeArchive(t, "pt2", "soak_huge_shape", filepath.Join(zooDir, "digits", "model.pt"), tensor, archive.FormatNoArchive)
	cfg := tensor + "[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 100000, 100000, 100000]\n"
	if err := os.WriteFile(filepath.Join(store, huge, "model-config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{storeArchive(t, "attack", "soak_cut", cut, tensor, ""), storeArchive(t, "attack", "soak_escape", escape, tensor, ""), huge}
}

// soakHostile sends the hostile registrations, and a gRPC unload of a served model without
// model control, every interval until stop: each must be refused, and the server must live
// through them (the soak's samples watch its memory, goroutines and files meanwhile).
func soakHostile(t *testing.T, s *server, urls []string, serving string, stop <-chan struct{}) {
	c := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	tick := time.NewTicker(soakEvery / 2)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, u := range urls {
			resp, err := http.Post(s.mgmt+"/models?url="+u+"&initial_workers=1&synchronous=true", "", nil)
			if err != nil {
				t.Errorf("hostile registration %s: %v", u, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Errorf("hostile registration %s was accepted", u)
			}
		}
		_, err := c.RepositoryModelUnload(callCtx(t), &pb.RepositoryModelUnloadRequest{ModelName: serving})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("gRPC unload of %s without model control: %v, want UNAVAILABLE", serving, err)
		}
	}
}
