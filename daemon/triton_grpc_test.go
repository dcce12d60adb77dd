package daemon_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/torchd/torchd/proto/inference"
)

// TestTritonGRPC drives a Triton repository's extensions over gRPC: the same index, load
// (with a config override), unload, statistics and log settings as REST.
func TestTritonGRPC(t *testing.T) {
	repo := t.TempDir()
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	repoModel(t, repo, "other", strings.Replace(tritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "explicit", "--load-model", "digits")
	settled(t, s)
	c := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))

	index := func() map[string]string {
		r, err := c.RepositoryIndex(callCtx(t), &pb.RepositoryIndexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range r.GetModels() {
			out[strings.TrimSuffix(m.Name+" "+m.Version, " ")] = strings.TrimSuffix(m.State+": "+m.Reason, ": ")
		}
		return out
	}
	if idx := index(); idx["digits 1"] != "READY" || idx["other"] != "" {
		t.Fatalf("index %v", idx)
	}
	override := `{"platform": "pytorch_libtorch", "max_batch_size": 4,
		"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}],
		"output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [10]}], "dynamic_batching": {}}`
	_, err := c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "other", Parameters: map[string]*pb.ModelRepositoryParameter{
		"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: override}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ModelConfig(callCtx(t), &pb.ModelConfigRequest{Name: "other"})
	if err != nil || cfg.GetConfig().GetMaxBatchSize() != 4 || cfg.GetConfig().GetInput()[0].GetName() != "INPUT__0" {
		t.Fatalf("config after the override: %v %v", cfg, err)
	}
	in := &pb.ModelInferRequest{ModelName: "other", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 1, 28, 28},
		Contents: &pb.InferTensorContents{Fp32Contents: digitsInput(0)}}}}
	if _, err := c.ModelInfer(callCtx(t), in); err != nil {
		t.Fatal(err)
	}
	st, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: "other"})
	if err != nil || st.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount() != 1 {
		t.Fatalf("statistics %v %v", st, err)
	}
	if _, err := c.RepositoryModelUnload(callCtx(t), &pb.RepositoryModelUnloadRequest{ModelName: "other"}); err != nil {
		t.Fatal(err)
	}
	if idx := index(); idx["other 1"] != "UNAVAILABLE: unloaded" {
		t.Fatalf("index after the unload %v", idx)
	}
	_, err = c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "nope"})
	wantCode(t, err, codes.InvalidArgument, "nope")

	// Log settings.
	ls, err := c.LogSettings(callCtx(t), &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 1}}}})
	if err != nil || ls.GetSettings()["log_verbose_level"].GetUint32Param() != 1 || !ls.GetSettings()["log_info"].GetBoolParam() {
		t.Fatalf("log settings %v %v", ls, err)
	}
	_, err = c.LogSettings(callCtx(t), &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_file": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "/tmp/x"}}}})
	wantCode(t, err, codes.InvalidArgument, "log_file")
}
