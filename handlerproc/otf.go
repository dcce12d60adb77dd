package handlerproc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The frontend side of TorchServe's frontend–worker protocol (ts/protocol/otf_message_handler.py):
// every integer is a big-endian int32, every string and body a length and its bytes, and
// lists end in -1. torchd writes load and predict messages and reads their replies.

const endOfList = -1

// maxField bounds one length read from the worker: a reply larger than this is a broken
// worker, not an answer (a response body is limited by the server's own body limits first).
const maxField = 1 << 30

// Load is the load message ('L').
type Load struct {
	ModelName, ModelPath, Handler, Envelope string
	BatchSize                               int
	GPU                                     int // -1: CPU
	LimitMaxImagePixels                     bool
}

// Param is one request parameter: the body, a form field or a query argument.
type Param struct {
	Name, ContentType string
	Value             []byte
}

// Header is one request header.
type Header struct{ Name, Value string }

// Request is one request of a predict message ('I').
type Request struct {
	ID      string
	Headers []Header
	Params  []Param
	// Part, when set, takes the request's intermediate replies as they come (a streaming
	// handler's), on the goroutine that runs the batch; the final Reply is then the last
	// part only. nil: the parts are joined into the final Reply.
	Part func(Reply)
}

// Reply is one request's answer within a predict reply.
type Reply struct {
	ID          string
	ContentType string
	Status      int
	Reason      string
	Headers     map[string]string
	Body        []byte
}

// PredictReply is the worker's answer to a predict message: a code and message for the
// whole batch, and one Reply per request it answered.
type PredictReply struct {
	Code    int
	Message string
	Replies []Reply
}

type encoder struct{ b []byte }

func (e *encoder) int(v int) { e.b = binary.BigEndian.AppendUint32(e.b, uint32(int32(v))) }
func (e *encoder) bytes(p []byte) {
	e.int(len(p))
	e.b = append(e.b, p...)
}
func (e *encoder) str(s string) {
	e.int(len(s))
	e.b = append(e.b, s...)
}

// encodeLoad returns the load message's bytes.
func encodeLoad(l Load) []byte {
	e := &encoder{b: []byte{'L'}}
	e.str(l.ModelName)
	e.str(l.ModelPath)
	e.int(l.BatchSize)
	e.str(l.Handler)
	e.int(l.GPU)
	e.str(l.Envelope)
	if l.LimitMaxImagePixels {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
	return e.b
}

// encodePredict returns the predict message's bytes for a batch.
func encodePredict(batch []Request) []byte {
	n := 1
	for _, r := range batch {
		n += 16 + len(r.ID)
		for _, h := range r.Headers {
			n += 8 + len(h.Name) + len(h.Value)
		}
		for _, p := range r.Params {
			n += 12 + len(p.Name) + len(p.ContentType) + len(p.Value)
		}
	}
	e := &encoder{b: make([]byte, 0, n+4)}
	e.b = append(e.b, 'I')
	for _, r := range batch {
		e.str(r.ID)
		for _, h := range r.Headers {
			e.str(h.Name)
			e.str(h.Value)
		}
		e.int(endOfList)
		for _, p := range r.Params {
			e.str(p.Name)
			e.str(p.ContentType)
			e.bytes(p.Value)
		}
		e.int(endOfList)
	}
	e.int(endOfList)
	return e.b
}

// errProtocol marks a reply that does not follow the protocol: the worker is broken.
var errProtocol = errors.New("the handler process broke TorchServe's worker protocol")

type decoder struct{ r *bufio.Reader }

func (d decoder) int() (int, error) {
	var b [4]byte
	if _, err := io.ReadFull(d.r, b[:]); err != nil {
		return 0, err
	}
	return int(int32(binary.BigEndian.Uint32(b[:]))), nil
}

// field reads a length-prefixed field; -1 (end of list) is returned as ok=false.
func (d decoder) field() (p []byte, ok bool, err error) {
	n, err := d.int()
	if err != nil {
		return nil, false, err
	}
	if n == endOfList {
		return nil, false, nil
	}
	if n < 0 || n > maxField {
		return nil, false, fmt.Errorf("%w: a field of %d bytes", errProtocol, n)
	}
	p = make([]byte, n)
	_, err = io.ReadFull(d.r, p)
	return p, true, err
}

func (d decoder) str() (string, error) {
	p, ok, err := d.field()
	if err == nil && !ok {
		err = fmt.Errorf("%w: a list ended where a string was due", errProtocol)
	}
	return string(p), err
}

// readLoadReply reads the worker's answer to a load message.
func readLoadReply(r *bufio.Reader) (code int, msg string, err error) {
	d := decoder{r}
	if code, err = d.int(); err != nil {
		return 0, "", err
	}
	if msg, err = d.str(); err != nil {
		return 0, "", err
	}
	if end, err := d.int(); err != nil || end != endOfList {
		return 0, "", cmpErr(err, fmt.Errorf("%w: a load reply with predictions", errProtocol))
	}
	return code, msg, nil
}

// readPredictReply reads one predict reply (a streaming handler sends several per batch).
func readPredictReply(r *bufio.Reader) (PredictReply, error) {
	d := decoder{r}
	var pr PredictReply
	var err error
	if pr.Code, err = d.int(); err != nil {
		return pr, err
	}
	if pr.Message, err = d.str(); err != nil {
		return pr, err
	}
	for {
		id, ok, err := d.field()
		if err != nil {
			return pr, err
		}
		if !ok {
			return pr, nil
		}
		rep := Reply{ID: string(id)}
		if rep.ContentType, err = d.str(); err != nil {
			return pr, err
		}
		if rep.Status, err = d.int(); err != nil {
			return pr, err
		}
		if rep.Reason, err = d.str(); err != nil {
			return pr, err
		}
		nh, err := d.int()
		if err != nil {
			return pr, err
		}
		if nh < 0 || nh > math.MaxUint16 {
			return pr, fmt.Errorf("%w: %d response headers", errProtocol, nh)
		}
		if nh > 0 {
			rep.Headers = make(map[string]string, nh)
		}
		for range nh {
			k, err := d.str()
			if err != nil {
				return pr, err
			}
			v, err := d.str()
			if err != nil {
				return pr, err
			}
			rep.Headers[k] = v
		}
		body, ok, err := d.field()
		if err != nil {
			return pr, err
		}
		if !ok {
			return pr, fmt.Errorf("%w: a reply without a body", errProtocol)
		}
		rep.Body = body
		pr.Replies = append(pr.Replies, rep)
	}
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}
