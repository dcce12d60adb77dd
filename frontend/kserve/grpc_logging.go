package kserve

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/frontend"
	pb "github.com/torchd/torchd/proto/inference"
)

// LogSettings is Triton's logging extension over gRPC, over the same Daemon functions as
// REST's /v2/logging. A request with settings changes them first.
func (s *oipService) LogSettings(_ context.Context, r *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	var in LogSettings
	for k, v := range r.GetSettings() {
		switch k {
		case "log_file", "log_format":
			str, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_StringParam)
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "%s must be a string_param", k)
			}
			if k == "log_file" {
				in.LogFile = &str.StringParam
			} else {
				in.LogFormat = &str.StringParam
			}
		case "log_info", "log_warning", "log_error":
			b, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_BoolParam)
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "%s must be a bool_param", k)
			}
			*map[string]**bool{"log_info": &in.LogInfo, "log_warning": &in.LogWarning, "log_error": &in.LogError}[k] = &b.BoolParam
		case "log_verbose_level":
			n, ok := v.GetParameterChoice().(*pb.LogSettingsRequest_SettingValue_Uint32Param)
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "log_verbose_level must be a uint32_param")
			}
			level := int(n.Uint32Param)
			in.LogVerboseLevel = &level
		default:
			return nil, status.Errorf(codes.InvalidArgument, "unknown log setting %q", k)
		}
	}
	if len(r.GetSettings()) > 0 {
		if err := s.a.SetLogSettings(in); err != nil {
			return nil, frontend.GRPCError(err)
		}
	}
	cur := s.a.LogSettings()
	str := func(v string) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: v}}
	}
	boolean := func(v bool) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: v}}
	}
	return &pb.LogSettingsResponse{Settings: map[string]*pb.LogSettingsResponse_SettingValue{
		"log_file": str(*cur.LogFile), "log_format": str(*cur.LogFormat),
		"log_info": boolean(*cur.LogInfo), "log_warning": boolean(*cur.LogWarning), "log_error": boolean(*cur.LogError),
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: uint32(*cur.LogVerboseLevel)}},
	}}, nil
}
