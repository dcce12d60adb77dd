package core

import (
	"reflect"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

// A version's settings are read whole; one still loading has none.
func TestVersionSettingsWhileLoading(t *testing.T) {
	var v ModelVersion
	if s := v.Settings(); !reflect.DeepEqual(s, ModelSettings{}) {
		t.Fatalf("a version still loading has settings %+v", s)
	}
}

// Retire answers the requests a version accepted before it closes: one held in the worker
// gets its answer, and the version is gone once Retire returns.
func TestRetireAnswersAcceptedRequests(t *testing.T) {
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "core_probe", archive.Settings{})
	held, release := holdWorkers(t)
	answered := make(chan error)
	go func() {
		v.enter()
		res, err := infer(v, Call{}, digit(0))
		v.record(err, time.Millisecond, res, false)
		answered <- err
	}()
	<-held
	retired := make(chan struct{})
	go func() { r.Retire(v); close(retired) }()
	waitFor(t, "the version to leave the registry", func() bool { _, err := r.Get("d", ""); return err != nil })
	select {
	case <-retired:
		t.Fatal("Retire returned while a request was in the worker")
	default:
	}
	release()
	if err := <-answered; err != nil {
		t.Fatalf("the accepted request: %v", err)
	}
	<-retired
	if s := v.Statistics(); s.Items != 1 {
		t.Errorf("statistics after Retire: %+v, want one inference", s)
	}
}
