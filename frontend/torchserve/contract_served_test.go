package torchserve_test

import (
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
)

// Parameters that TorchServe cannot parse fall back to their defaults there, and scripts
// written against it send them: torchd registers, lists and scales as TorchServe does, and
// logs a warning that names the parameter and the default.
func TestLenientParameters(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, digitsV2, digitsTensorArchive, slowModel})

	expectStatus(t, s.mgmt("POST", "/models?url=digits.mar&batch_size=dd&max_batch_delay=junk&synchronous=true", "", nil),
		200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	// TorchServe registers a negative initial_workers with none.
	expectStatus(t, s.mgmt("POST", "/models?url=slow.mar&initial_workers=-1", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	// synchronous is Java's Boolean.parseBoolean: anything but "true" is false.
	expectStatus(t, s.mgmt("POST", "/models?url=digits_tensor.mar&synchronous=-1", "", nil), 202, "Processing worker updates...")
	expectStatus(t, s.mgmt("POST", "/models?url=v2/digits.mar&synchronous=Nan", "", nil), 202, "Processing worker updates...")
	// Unparsable batch_size and max_batch_delay left version 1.0 with the defaults that
	// version 2.0, registered without them, has.
	var desc []map[string]any
	s.mgmt("GET", "/models/digits/all", "", nil).json(t, &desc)
	if len(desc) != 2 || desc[0]["batchSize"] != desc[1]["batchSize"] || desc[0]["maxBatchDelay"] != desc[1]["maxBatchDelay"] {
		t.Fatalf("defaults after unparsable batch_size and max_batch_delay: %v", desc)
	}
	// An empty url is looked up in the model store and not found.
	errorShape(t, s.mgmt("POST", "/models?url=", "", nil), 404, "ModelNotFoundException", "Model not found in model store")
	// Parsable but out of range stays 400, before the archive is looked for: TorchServe has
	// no default to fall back to there.
	errorShape(t, s.mgmt("POST", "/models?url=resnet18.mar&batch_size=0", "", nil), 400, "BadRequestException", "batch_size")

	var list struct {
		NextPageToken string `json:"nextPageToken"`
		Models        []struct {
			ModelName string `json:"modelName"`
		} `json:"models"`
	}
	for _, q := range []string{"limit=&next_page_token=", "limit=x&next_page_token=y", "limit=100&next_page_token=-1", "limit=-3"} {
		list.Models, list.NextPageToken = nil, ""
		r := s.mgmt("GET", "/models?"+q, "", nil)
		r.json(t, &list)
		if r.status != 200 || len(list.Models) != 3 || list.Models[0].ModelName != "digits" {
			t.Fatalf("list ?%s: %d %s", q, r.status, r.body)
		}
	}
	list.Models, list.NextPageToken = nil, ""
	s.mgmt("GET", "/models?limit=1&next_page_token=-1", "", nil).json(t, &list)
	if len(list.Models) != 1 || list.Models[0].ModelName != "digits" || list.NextPageToken != "1" {
		t.Fatalf("list limit=1&next_page_token=-1: %+v", list)
	}

	// min_worker=nan is the default, 1: 202 as TorchServe; -1 fails with TorchServe's 500, a
	// max_worker under min_worker with its 400, and the model keeps its workers.
	expectStatus(t, s.mgmt("PUT", "/models/slow?min_worker=nan", "", nil), 202, "Processing worker updates...")
	expectStatus(t, s.mgmt("PUT", "/models/slow?min_worker=1&max_worker=x&synchronous=TRUE", "", nil), 200, "Workers scaled to 1 for model: slow")
	errorShape(t, s.mgmt("PUT", "/models/slow?min_worker=-1", "", nil), 500, "InternalServerException", "Parameter min_worker must be an integer ≥ 0, got -1")
	errorShape(t, s.mgmt("PUT", "/models/slow?min_worker=-1&synchronous=true", "", nil), 500, "InternalServerException", "min_worker")
	errorShape(t, s.mgmt("PUT", "/models/slow?min_worker=1&max_worker=-1", "", nil), 400, "BadRequestException", "max_worker cannot be less than min_worker.")
	errorShape(t, s.mgmt("PUT", "/models/nope?min_worker=-1", "", nil), 404, "ModelNotFoundException", "nope")
	var slow []map[string]any
	s.mgmt("GET", "/models/slow", "", nil).json(t, &slow)
	if len(slow) != 1 || slow[0]["minWorkers"] != 1.0 {
		t.Fatalf("after refused scalings: %v, want minWorkers 1", slow)
	}

	log := s.log.String()
	for _, p := range []string{"batch_size", "max_batch_delay", "synchronous", "limit", "next_page_token", "min_worker", "max_worker"} {
		if !strings.Contains(log, "parameter="+p) {
			t.Errorf("no warning names parameter %s", p)
		}
	}
	if !strings.Contains(log, "default=") {
		t.Errorf("the warnings do not name the default:\n%s", log)
	}
}

// startup_timeout bounds a waiting registration's load and warm-up: 0 leaves no time, and the
// registration fails with TorchServe's 500 and leaves nothing behind; -1 or one that does not
// parse is the default.
func TestStartupTimeout(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, digitsTensorArchive, slowModel})
	errorShape(t, s.mgmt("POST", "/models?url=digits.mar&startup_timeout=0", "", nil), 500, "InternalServerException", "Failed to start workers for model digits version: 1.0")
	errorShape(t, s.mgmt("POST", "/models?url=digits.mar&startup_timeout=-5&initial_workers=1", "", nil), 500, "InternalServerException", "Failed to start workers")
	var list struct{ Models []struct{ ModelName string } }
	s.mgmt("GET", "/models", "", nil).json(t, &list)
	if len(list.Models) != 0 {
		t.Fatalf("a timed-out registration left %+v", list.Models)
	}
	// With no workers to start, nothing can time out.
	expectStatus(t, s.mgmt("POST", "/models?url=slow.mar&startup_timeout=0&initial_workers=0", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	expectStatus(t, s.mgmt("POST", "/models?url=digits.mar&startup_timeout=30", "", nil), 200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	expectStatus(t, s.mgmt("POST", "/models?url=digits_tensor.mar&startup_timeout=soon", "", nil), 200, `Model "digits_tensor" Version: 1.0 registered with 1 initial workers`)
	var desc []map[string]any
	s.mgmt("GET", "/models/digits", "", nil).json(t, &desc)
	if desc[0]["startupTimeout"] != 30.0 {
		t.Fatalf("startupTimeout %v, want 30", desc[0]["startupTimeout"])
	}
	s.mgmt("GET", "/models/digits_tensor", "", nil).json(t, &desc)
	if desc[0]["startupTimeout"] != 120.0 {
		t.Fatalf("startupTimeout %v, want the default 120", desc[0]["startupTimeout"])
	}
}

// TorchServe's management API starts no worker at registration unless asked
// (initial_workers, the archive's minWorkers, or an explicit workers setting, which is
// TorchServe's default_workers_per_model): so a registration with startup_timeout=0 or
// asynchronous answers 200 with 0 workers, and the scale and unregister calls that follow
// find the model.
func TestTorchServeRegistrationDefaults(t *testing.T) {
	archives := []storeArchive{digitsV1, digitsV2, digitsTensorArchive, slowModel}
	s := serve(t, 0, archives)
	zero := func(name string) string {
		return `Model "` + name + `" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`
	}
	expectStatus(t, s.mgmt("POST", "/models?url=digits.mar", "", nil), 200, zero("digits"))
	expectStatus(t, s.mgmt("POST", "/models?url=slow.mar&synchronous=false", "", nil), 200, zero("slow"))
	expectStatus(t, s.mgmt("POST", "/models?url=digits_tensor.mar&startup_timeout=0", "", nil), 200, zero("digits_tensor"))
	var desc []struct {
		MinWorkers int   `json:"minWorkers"`
		Workers    []any `json:"workers"`
	}
	s.mgmt("GET", "/models/digits", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].MinWorkers != 0 || len(desc[0].Workers) != 0 {
		t.Fatalf("describe after a plain registration: %+v, want no workers", desc)
	}
	png, _ := heldOut(t)
	if r := s.inf("POST", "/predictions/digits", "image/png", png[0]); r.status != 503 {
		t.Fatalf("a prediction with no worker: %d %s, want 503", r.status, r.body)
	}
	expectStatus(t, s.mgmt("PUT", "/models/digits?min_worker=1&synchronous=true", "", nil), 200, "Workers scaled to 1 for model: digits")
	if r := s.inf("POST", "/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("a prediction once scaled: %d %s", r.status, r.body)
	}
	// Asked for, a worker starts at registration.
	expectStatus(t, s.mgmt("POST", "/models?url=v2/digits.mar&initial_workers=1&synchronous=true", "", nil), 200, `Model "digits" Version: 2.0 registered with 1 initial workers`)
	expectStatus(t, s.mgmt("DELETE", "/models/slow", "", nil), 200, `Model "slow" unregistered`)

	// An explicit workers setting (the server's) is TorchServe's default_workers_per_model:
	// registrations take it.
	w := serve(t, 0, archives, options{server: archive.Settings{MinWorkers: archive.Fixed(2)}})
	expectStatus(t, w.mgmt("POST", "/models?url=digits.mar&synchronous=true", "", nil), 200, `Model "digits" Version: 1.0 registered with 2 initial workers`)
}
