package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/torchd/torchd/handlers"
)

// A handler's error keeps the kind the handler gave it, and its code rides along as data; an
// error without a kind takes the step's. The failure reason follows the kind alone.
func TestHandlerErrorKinds(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		step   error // the kind of the step it failed in
		kind   error
		code   int
		reason string
	}{
		{"bad input", handlers.BadInput("not an image"), ErrBadInput, ErrBadInput, 0, FailOther},
		{"bad input in postprocess", handlers.BadInput("no such label"), ErrInference, ErrBadInput, 0, FailOther},
		{"a handler's 4xx", handlers.Answered(404, "no such thing"), ErrInference, ErrBadInput, 404, FailOther},
		{"a handler's 5xx", handlers.Answered(503, "Prediction failed"), ErrInference, ErrInference, 503, FailBackend},
		{"refused", &handlers.Error{Kind: ErrUnsupported, Code: 501, Msg: "no"}, ErrInference, ErrUnsupported, 501, FailOther},
		{"wrapped", fmt.Errorf("step 2: %w", handlers.Answered(400, "bad")), ErrInference, ErrBadInput, 400, FailOther},
		{"no kind", errors.New("the model broke"), ErrInference, ErrInference, 0, FailBackend},
		{"no kind in preprocess", errors.New("short read"), ErrBadInput, ErrBadInput, 0, FailOther},
	} {
		e := handlerError(c.err, c.step, c.err.Error())
		if e.Kind != c.kind || e.HandlerCode != c.code || e.Msg != c.err.Error() {
			t.Errorf("%s: kind %v, code %d, message %q; want %v, %d, %q", c.name, e.Kind, e.HandlerCode, e.Msg, c.kind, c.code, c.err)
		}
		for _, k := range Kinds {
			if k != c.kind && errors.Is(e, k) {
				t.Errorf("%s: is %v as well as %v: a table would answer whichever it lists first", c.name, k, c.kind)
			}
		}
		if got := FailReason(e); got != c.reason {
			t.Errorf("%s: failure reason %s, want %s", c.name, got, c.reason)
		}
		var he *handlers.Error
		if _, ok := c.err.(*handlers.Error); ok && !errors.As(e, &he) {
			t.Errorf("%s: the handler's error is not reachable by errors.As", c.name)
		}
	}
}
