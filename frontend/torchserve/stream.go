package torchserve

import (
	"bufio"
	"context"
	"errors"
	"sync"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// Streaming answers, as TorchServe sends them: each part a handler sends with
// send_intermediate_predict_response goes to the client as it comes, as an HTTP chunk
// (Transfer-Encoding: chunked) on POST /predictions, as a message on gRPC's
// StreamPredictions. Only handler processes stream; the other APIs get the parts joined.

// partQueue holds a request's parts between the worker that receives them and the
// front-end that sends them, so that a slow client never holds up a worker. It holds at most
// maxQueuedParts bytes: a client that does not read that much fails its request (the parts
// are dropped and the stream is cut), as a worker must not wait on one client.
type partQueue struct {
	mu       sync.Mutex
	parts    []handlers.Response
	bytes    int
	overflow bool
	ready    chan struct{} // signalled after each push
	// cut, when set, is called once at the overflow: it ends the transfer that a client
	// which does not read keeps blocked.
	cut func()
}

// maxQueuedParts bounds the bytes of one request's parts that wait for its client.
const maxQueuedParts = 64 << 20

// errPartsOverflow is a streamed request whose client did not take its parts.
var errPartsOverflow = errors.New("the client did not read the streamed answer: more than 64 MiB of its parts waited to be sent, and the rest were dropped")

func newPartQueue() *partQueue { return &partQueue{ready: make(chan struct{}, 1)} }

func (q *partQueue) push(r handlers.Response) {
	q.mu.Lock()
	if q.overflow {
		q.mu.Unlock()
		return
	}
	var cut func()
	if q.bytes+len(r.Body) > maxQueuedParts {
		q.overflow, q.parts, q.bytes, cut = true, nil, 0, q.cut
	} else {
		q.parts = append(q.parts, r)
		q.bytes += len(r.Body)
	}
	q.mu.Unlock()
	if cut != nil {
		cut()
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns the parts queued so far, and whether the queue overflowed.
func (q *partQueue) take() ([]handlers.Response, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.parts
	q.parts, q.bytes = nil, 0
	return p, q.overflow
}

// onOverflow sets cut; it is called at once if the queue already overflowed.
func (q *partQueue) onOverflow(cut func()) {
	q.mu.Lock()
	q.cut = cut
	over := q.overflow
	q.mu.Unlock()
	if over {
		cut()
	}
}

// mayStream reports whether the model answers through handler processes, whose handler may
// stream.
func (a *API) mayStream(name, ver string) bool {
	v, err := a.Registry.Get(name, ver)
	return err == nil && v.HandlerName == archive.HandlerPython
}

// predictStreamed is predict for a model whose handler may stream. The request is served
// on a goroutine of its own; if its answer comes whole, it is written as predict writes it.
// If a part comes first, the response is committed to that part's status and content type
// and sent in chunks, each part flushed as it comes; the served request's accounting, and
// its trace span, end with its last part.
func (a *API) predictStreamed(ctx *fasthttp.RequestCtx, c core.Call, name, ver string) {
	parts := newPartQueue()
	done := make(chan struct{})
	var (
		mu                  sync.Mutex
		committed, finished bool
		resp                *handlers.Response
		err                 error
	)
	trace := frontend.RESTTrace(ctx)
	// Once the response streams, fasthttp may reuse ctx for the connection's next request
	// while this one's batch runs on: the body it keeps is no longer needed then (the
	// process has the whole request before it sends a part).
	if keep := c.Keep; keep != nil {
		c.Keep = func() {
			mu.Lock()
			defer mu.Unlock()
			if !committed {
				keep()
			}
		}
	}
	go func() {
		defer close(done)
		var res core.Result
		res, err = a.Registry.Serve(&core.Request{Model: name, Version: ver, Call: c,
			Decode: func(*core.ModelVersion) (core.Input, error) {
				req, err := requestPayloads(ctx, a.MaxRequestSize)
				if err != nil {
					return core.Input{}, payloadError(err)
				}
				req.Stream = parts.push
				return core.Input{Payloads: req}, nil
			}})
		resp = res.Response
		status := 200
		if err != nil {
			status = frontend.APIErrorOf(err).Status
		} else if resp != nil {
			status = cmpStatus(resp.Status)
		}
		mu.Lock()
		finished = true
		streamed := committed
		mu.Unlock()
		if streamed && trace != nil {
			trace.EndHTTP(status)
		}
	}()
	select {
	case <-done:
	case <-parts.ready:
	}
	mu.Lock()
	committed = !finished
	mu.Unlock()
	if !committed {
		<-done // finished is set just before done closes
	}
	first, _ := parts.take()
	if !committed && (len(first) == 0 || err != nil) {
		writeWhole(ctx, resp, err)
		return
	}
	// A handler that sent parts answers in chunks, as in TorchServe, also when its last part
	// came before the first was written.
	if committed && trace != nil {
		frontend.KeepTrace(ctx) // the serving goroutine ends the span
	}
	ctx.SetStatusCode(cmpStatus(first[0].Status))
	if ct := first[0].ContentType; ct != "" {
		ctx.SetContentType(ct)
	}
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		// A client that lets its parts pile up is cut off: closing the connection ends a
		// write it blocks, and the chunked body never ends, so the client sees a failure.
		conn := ctx.Conn()
		parts.onOverflow(func() { conn.Close() })
		// A write that fails (the client left) stops the writes, not the wait: the batch
		// runs to its end either way.
		var werr error
		send := func(body []byte) {
			if werr == nil && len(body) > 0 {
				if _, werr = w.Write(body); werr == nil {
					werr = w.Flush()
				}
			}
		}
		sendQueued := func() {
			ps, over := parts.take()
			if over && werr == nil {
				werr = errPartsOverflow
				conn.Close()
			}
			for _, p := range ps {
				send(p.Body)
			}
		}
		for _, p := range first {
			send(p.Body)
		}
		for {
			select {
			case <-parts.ready:
				sendQueued()
				continue
			case <-done:
			}
			break
		}
		sendQueued()
		// The status is sent: an error after the first part can only end the stream.
		if err == nil && resp != nil {
			send(resp.Body)
		}
	})
}

// writeWhole writes an answer that came whole, as predict writes it.
func writeWhole(ctx *fasthttp.RequestCtx, resp *handlers.Response, err error) {
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	writeResponse(ctx, resp)
}

func cmpStatus(s int) int {
	if s == 0 {
		return 200
	}
	return s
}

// StreamPredictions sends each part of a streaming handler's answer as a message, then the
// last one, as TorchServe does; other handlers' answers are one message.
func (s *tsInferenceService) StreamPredictions(r *tspb.PredictionsRequest, stream tspb.InferenceAPIsService_StreamPredictionsServer) error {
	resp, err, serr := s.predictInParts(stream.Context(), r, stream.Send)
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return stream.Send(resp)
}

// predictInParts serves r, sending each part of a streaming handler's answer through send as
// it comes (with r's sequence id), and returns the last answer, the request's error and the
// first send's error. send is called from the caller's goroutine only; a failed send stops
// the sends, not the wait, since the batch runs to its end either way.
func (s *tsInferenceService) predictInParts(ctx context.Context, r *tspb.PredictionsRequest, send func(*tspb.PredictionResponse) error) (resp *tspb.PredictionResponse, err, serr error) {
	parts := newPartQueue()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err = s.a.tsPredict(ctx, r, parts.push)
	}()
	flush := func() {
		ps, over := parts.take()
		if over && serr == nil {
			serr = status.Error(codes.ResourceExhausted, errPartsOverflow.Error())
		}
		for _, p := range ps {
			if serr == nil {
				serr = send(&tspb.PredictionResponse{Prediction: p.Body, SequenceId: r.SequenceId})
			}
		}
	}
	for {
		select {
		case <-parts.ready:
			flush()
			continue
		case <-done:
		}
		break
	}
	flush()
	return resp, err, serr
}
