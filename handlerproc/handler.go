package handlerproc

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// The python handler passes each request's payloads to the model's handler processes as
// they came, and their answers back: the processes do TorchServe's preprocess, inference
// and postprocess. The core batches, queues and times the requests as for any handler.
func init() {
	handlers.Register(archive.HandlerPython, func(handlers.Context) (handlers.Handler, error) { return pythonHandler{}, nil })
}

type pythonHandler struct{}

var _ handlers.Inferer = pythonHandler{}

// call is one request on its way through a handler process: State of its Sample.
type call struct {
	req   Request
	reply *Reply
}

var requestSeq atomic.Uint64

// requestPrefix keeps request ids unique across restarts of torchd, as TorchServe's UUIDs are.
var requestPrefix = strconv.FormatInt(time.Now().UnixNano(), 36)

func (pythonHandler) Preprocess(r *handlers.Request) (*handlers.Sample, error) {
	c := &call{req: Request{ID: requestPrefix + "-" + strconv.FormatUint(requestSeq.Add(1), 36)}}
	if r.Headers != nil {
		for k, v := range r.Headers {
			c.req.Headers = append(c.req.Headers, Header{Name: k, Value: v})
		}
	}
	for _, p := range r.Inputs {
		name := p.Name
		if name == "" {
			name = "body"
		}
		c.req.Params = append(c.req.Params, Param{Name: name, ContentType: p.ContentType, Value: p.Data})
	}
	if stream := r.Stream; stream != nil {
		c.req.Part = func(rep Reply) {
			stream(handlers.Response{Status: rep.Status, ContentType: rep.ContentType, Body: rep.Body})
		}
	}
	// Query arguments are parameters too, as TorchServe's frontend passes them.
	if r.Query != nil {
		for k, v := range r.Query {
			c.req.Params = append(c.req.Params, Param{Name: k, Value: []byte(v)})
		}
	}
	// One request is one item of the batch: a handler gets one dict per request, as in
	// TorchServe, whatever its form fields hold.
	return &handlers.Sample{Items: 1, State: c}, nil
}

// Infer sends the batch to a process (Model.Run): the core calls Run itself, as the
// model's backend; Infer is for the callers of handlers.Infer (bench-model, the tuner).
func (pythonHandler) Infer(m torch.Model, batch []*handlers.Sample) ([][]handlers.Tensor, error) {
	pm, ok := m.(*Model)
	if !ok {
		return nil, fmt.Errorf("the python handler runs only in handler processes")
	}
	return pm.Run(batch, nil)
}

// Run is the model as core runs it (core.Model): it sends the batch of the python
// handler's samples to a process and files each request's reply in its sample.
func (pm *Model) Run(batch []*handlers.Sample, _ *handlers.Stage) ([][]handlers.Tensor, error) {
	reqs := make([]Request, len(batch))
	for i, s := range batch {
		c, ok := s.State.(*call)
		if !ok {
			return nil, fmt.Errorf("a handler process runs the python handler's requests only")
		}
		reqs[i] = c.req
	}
	pr, err := pm.Predict(reqs)
	if err != nil {
		return nil, LostBatch(err)
	}
	if pr.Code != 200 {
		// TorchServe answers every request of the batch with the worker's code and message,
		// e.g. 503 "Prediction failed" when the handler raised.
		return nil, handlers.Answered(pr.Code, pr.Message)
	}
	byID := make(map[string]*Reply, len(pr.Replies))
	for i := range pr.Replies {
		byID[pr.Replies[i].ID] = &pr.Replies[i]
	}
	for _, s := range batch {
		c := s.State.(*call)
		if c.reply = byID[c.req.ID]; c.reply == nil {
			// TorchServe's service answers 503 when a handler's answers do not match its batch.
			return nil, handlers.Answered(503, "the handler returned no answer for a request of its batch")
		}
		if !validStatus(c.reply.Status) {
			// 1000 would go out as "HTTP/1.1 1000", and a 101 as a final answer tells a proxy
			// to switch protocols: the client gets a 500, the log the handler's status.
			pm.cfg.Log.Warn("handler answered an invalid HTTP status: answered 500", "model", pm.cfg.ModelName, "status", c.reply.Status)
			c.reply = &Reply{ID: c.reply.ID, Status: 500, Reason: invalidStatusMsg}
		}
	}
	return make([][]handlers.Tensor, len(batch)), nil
}

const invalidStatusMsg = "the handler answered an invalid HTTP status (a final answer's is 200 to 599)"

// validStatus reports whether a handler's status can go to the client as a final answer:
// 1xx are interim, and a status past 599 or below 100 is none.
func validStatus(s int) bool { return s >= 200 && s <= 599 }

// lostBatch is a batch that no process could run to its end: it crashed, passed the
// response timeout, or none was free. The core does not retry its requests one by one (as
// it does a batch the handler refused), since that would run the culprit again, for another
// response timeout or another process.
type lostBatch struct{ err error }

func (e lostBatch) Error() string { return e.err.Error() }
func (e lostBatch) Unwrap() error { return e.err }

// WholeBatchLost tells the core's worker pool not to retry the batch request by request.
func (lostBatch) WholeBatchLost() bool { return true }

// LostBatch is Predict's error as a batch error that the core does not retry request by
// request (see lostBatch), for the runtimes over handler processes.
func LostBatch(err error) error {
	return lostBatch{&handlers.Error{Kind: errkind.Inference, Msg: err.Error()}}
}

// Kind names the backend in the batch spans.
func (*Model) Kind() string { return "handler_process" }

func (pythonHandler) Postprocess(s *handlers.Sample, _ []handlers.Tensor) (*handlers.Response, error) {
	rep := s.State.(*call).reply
	if rep == nil {
		return nil, handlers.Failed("the handler process gave no answer")
	}
	status := rep.Status
	if status == 0 {
		status = 200
	}
	if status >= 400 {
		msg := string(rep.Body)
		if rep.Reason != "" {
			msg = rep.Reason
		}
		return nil, handlers.Answered(status, msg)
	}
	return &handlers.Response{Status: status, ContentType: rep.ContentType, Body: rep.Body}, nil
}
