package handlerproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
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

// call is one request on its way through a handler process: State of its Sample. A request
// is one request of the worker's batch, or, as rows (handlers.Request.Rows), one each.
type call struct {
	reqs    []Request
	replies []*Reply
	rows    bool // the answer is the JSON list of the rows' answers
}

var requestSeq atomic.Uint64

// requestPrefix keeps request ids unique across restarts of torchd, as TorchServe's UUIDs are.
var requestPrefix = strconv.FormatInt(time.Now().UnixNano(), 36)

func newRequest() Request {
	return Request{ID: requestPrefix + "-" + strconv.FormatUint(requestSeq.Add(1), 36)}
}

// explainHeader is how TorchServe's frontend tells a handler to explain (BaseHandler's
// _is_explain reads it): "True" on explanations, "False" on every other inference, whatever
// the client sent.
const explainHeader = "explain"

// TakesRows: KServe requests reach a Python handler as TorchServe's envelopes hand them.
func (pythonHandler) TakesRows() {}

func (pythonHandler) Preprocess(r *handlers.Request) (*handlers.Sample, error) {
	var headers []Header
	if r.Headers != nil {
		for k, v := range r.Headers {
			// torchd's own headers to the worker are torchd's, never a client's.
			if !strings.EqualFold(k, explainHeader) && !strings.EqualFold(k, threadsHeader) {
				headers = append(headers, Header{Name: k, Value: v})
			}
		}
	}
	headers = append(headers, Header{Name: explainHeader, Value: "False"})
	if len(r.Rows) > 0 {
		// Each row is a request of the worker's batch, so that the handler's data is the
		// envelope's list of instances, each a dict of its fields.
		c := &call{rows: true, reqs: make([]Request, len(r.Rows))}
		for i, row := range r.Rows {
			c.reqs[i] = newRequest()
			c.reqs[i].Headers = headers
			for _, p := range row {
				c.reqs[i].Params = append(c.reqs[i].Params, Param{Name: p.Name, ContentType: p.ContentType, Value: p.Data})
			}
		}
		return &handlers.Sample{Items: len(r.Rows), State: c}, nil
	}
	req := newRequest()
	req.Headers = headers
	for _, p := range r.Inputs {
		name := p.Name
		if name == "" {
			name = "body"
		}
		req.Params = append(req.Params, Param{Name: name, ContentType: p.ContentType, Value: p.Data})
	}
	if stream := r.Stream; stream != nil {
		req.Part = func(rep Reply) {
			stream(handlers.Response{Status: rep.Status, ContentType: rep.ContentType, Body: rep.Body})
		}
	}
	// Query arguments are parameters too, as TorchServe's frontend passes them.
	if r.Query != nil {
		for k, v := range r.Query {
			req.Params = append(req.Params, Param{Name: k, Value: []byte(v)})
		}
	}
	// One request is one item of the batch: a handler gets one dict per request, as in
	// TorchServe, whatever its form fields hold.
	return &handlers.Sample{Items: 1, State: &call{reqs: []Request{req}}}, nil
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
func (pm *Model) Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error) {
	return pm.RunThreads(batch, stage, 0)
}

// RunThreads is Run with the batch's share of the cores (core.ThreadCarrier): the process
// runs the batch on that many intra-op threads (threads.go); 0 leaves its count as it is.
func (pm *Model) RunThreads(batch []*handlers.Sample, _ *handlers.Stage, threads int) ([][]handlers.Tensor, error) {
	calls := make([]*call, len(batch))
	var reqs []Request
	for i, s := range batch {
		c, ok := s.State.(*call)
		if !ok {
			return nil, core.Errorf(core.ErrUnsupported, "model %s runs in handler processes, which take requests through its Python handler, not tensors", pm.cfg.ModelName)
		}
		calls[i] = c
		reqs = append(reqs, c.reqs...)
	}
	if err := pm.runCalls(calls, reqs, threads); err != nil {
		return nil, err
	}
	return make([][]handlers.Tensor, len(batch)), nil
}

// runCalls sends the requests of calls to a process, on threads intra-op threads (0: its
// own count), and files each reply in its call.
func (pm *Model) runCalls(calls []*call, reqs []Request, threads int) error {
	pr, err := pm.predict(reqs, threads)
	if err != nil {
		return LostBatch(err)
	}
	if pr.Code != 200 {
		// TorchServe answers every request of the batch with the worker's code and message,
		// e.g. 503 "Prediction failed" when the handler raised.
		return handlers.Answered(pr.Code, pr.Message)
	}
	byID := make(map[string]*Reply, len(pr.Replies))
	for i := range pr.Replies {
		byID[pr.Replies[i].ID] = &pr.Replies[i]
	}
	for _, c := range calls {
		c.replies = make([]*Reply, len(c.reqs))
		for i, r := range c.reqs {
			rep := byID[r.ID]
			if rep == nil {
				// TorchServe's service answers 503 when a handler's answers do not match its batch.
				return handlers.Answered(503, "the handler returned no answer for a request of its batch")
			}
			if !validStatus(rep.Status) {
				// 1000 would go out as "HTTP/1.1 1000", and a 101 as a final answer tells a proxy
				// to switch protocols: the client gets a 500, the log the handler's status.
				pm.cfg.Log.Warn("handler answered an invalid HTTP status: answered 500", "model", pm.cfg.ModelName, "status", rep.Status)
				rep = &Reply{ID: rep.ID, Status: 500, Reason: invalidStatusMsg}
			}
			c.replies[i] = rep
		}
	}
	return nil
}

// CanExplain: a Python handler explains in its process (BaseHandler's explain_handle), or
// says itself that it cannot.
func (*Model) CanExplain() error { return nil }

// ExplainsInHandler: torchd's handler for the model (the python handler) has no explanation
// of its own to offer; the handler process's does.
func (*Model) ExplainsInHandler() {}

// Explain runs one request with TorchServe's explain header set, alone, as TorchServe's
// handlers decide to explain a batch from its first request.
func (pm *Model) Explain(s *handlers.Sample, _ int) (*handlers.Response, error) {
	c, ok := s.State.(*call)
	if !ok {
		return nil, core.Errorf(core.ErrUnsupported, "model %s runs in handler processes, which explain requests through its Python handler, not tensors", pm.cfg.ModelName)
	}
	for i := range c.reqs {
		h := slices.Clone(c.reqs[i].Headers)
		for j := range h {
			if h[j].Name == explainHeader {
				h[j].Value = "True"
			}
		}
		c.reqs[i].Headers = h
	}
	if err := pm.runCalls([]*call{c}, c.reqs, 0); err != nil {
		return nil, err
	}
	return pythonHandler{}.Postprocess(s, nil)
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
	c := s.State.(*call)
	if len(c.replies) != len(c.reqs) {
		return nil, handlers.Failed("the handler process gave no answer")
	}
	if !c.rows {
		return replyResponse(c.replies[0])
	}
	// The envelope's answer: the list of the rows' answers, each as the JSON it is, or as a
	// string where the handler answered text.
	list := make([]json.RawMessage, len(c.replies))
	for i, rep := range c.replies {
		resp, err := replyResponse(rep)
		if err != nil {
			return nil, err
		}
		body := bytes.TrimSpace(resp.Body)
		if !json.Valid(body) || len(body) == 0 {
			body, _ = json.Marshal(strings.ToValidUTF8(string(resp.Body), "\uFFFD"))
		}
		list[i] = body
	}
	body, err := json.Marshal(list)
	if err != nil {
		return nil, core.Errorf(core.ErrInference, "the handler's answers cannot be put in a list: %v", err)
	}
	return &handlers.Response{ContentType: "application/json", Body: body}, nil
}

// replyResponse is a request's reply as its response, or its error where the handler
// answered one.
func replyResponse(rep *Reply) (*handlers.Response, error) {
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
