package frontend

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health is grpc.health.v1: SERVING once the start-up models are warm and every
// model is healthy, as GET /ping and /v2/health/ready. The service name is not looked at.
type Health struct {
	healthpb.UnimplementedHealthServer
	Ready func() bool
	// Stopping closes when the server starts to stop, which ends the watches that would
	// otherwise hold a graceful stop.
	Stopping <-chan struct{}
}

func (h *Health) status() healthpb.HealthCheckResponse_ServingStatus {
	if h.Ready() {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

func (h *Health) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return &healthpb.HealthCheckResponse{Status: h.status()}, nil
}

// Watch sends the status, then each change, checked every healthPoll.
func (h *Health) Watch(_ *healthpb.HealthCheckRequest, s healthpb.Health_WatchServer) error {
	const healthPoll = time.Second
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	tick := time.NewTicker(healthPoll)
	defer tick.Stop()
	for {
		if st := h.status(); st != last {
			if err := s.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-s.Context().Done():
			return s.Context().Err()
		case <-h.Stopping:
			return status.Error(codes.Unavailable, "the server is stopping")
		case <-tick.C:
		}
	}
}
