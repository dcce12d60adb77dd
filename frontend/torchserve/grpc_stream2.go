package torchserve

import (
	"errors"
	"io"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tspb "github.com/torchd/torchd/proto/torchserve"
)

// tsSequenceHeader is the request header in which TorchServe's worker finds a request's
// sequence id (Context.get_sequence_id).
const tsSequenceHeader = "ts_request_sequence_id"

// StreamPredictions2 is TorchServe's sequence stream: the client sends PredictionsRequests
// of one sequence (sequence_id required) on one stream, and each is served in turn, in the
// order sent, through the core as Predictions serves it. Its answers go back as messages
// carrying the sequence id: a streaming handler's parts one message each, then the last. A
// request that fails answers one message with its error in status, as TorchServe's does,
// and the stream goes on with the next; only the client's leaving ends it early.
func (s *tsInferenceService) StreamPredictions2(stream tspb.InferenceAPIsService_StreamPredictions2Server) error {
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.predictInSequence(stream, r); err != nil {
			return err
		}
	}
}

// predictInSequence serves one request of a StreamPredictions2 stream. It returns an error
// only when the stream itself is gone.
func (s *tsInferenceService) predictInSequence(stream tspb.InferenceAPIsService_StreamPredictions2Server, r *tspb.PredictionsRequest) error {
	seq := r.GetSequenceId()
	if seq == "" {
		return stream.Send(&tspb.PredictionResponse{SequenceId: r.SequenceId,
			Status: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "Parameter sequenceId is required."}})
	}
	// The handler reads the sequence id as TorchServe's worker gives it: a request header.
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(tsSequenceHeader, seq)
	ctx = metadata.NewIncomingContext(ctx, md)

	resp, err, serr := s.predictInParts(ctx, r, stream.Send)
	switch {
	case serr != nil:
		return serr
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case err != nil:
		st := status.Convert(err)
		return stream.Send(&tspb.PredictionResponse{SequenceId: r.SequenceId,
			Status: &rpcstatus.Status{Code: int32(st.Code()), Message: st.Message()}})
	}
	resp.SequenceId = r.SequenceId
	return stream.Send(resp)
}
