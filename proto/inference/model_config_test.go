package inference

import (
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
)

// A config.pbtxt of the kind Triton's PyTorch backend documentation shows, with the fields
// torchd's repository loader reads; prototext refuses unknown fields, so each must be in the schema.
const pytorchConfig = `
name: "digits"
platform: "pytorch_libtorch"
backend: "pytorch"
max_batch_size: 32
version_policy: { specific: { versions: [1, 3] } }
input [
  { name: "input__0" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] reshape: { shape: [ 784 ] } optional: false }
]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" } ]
instance_group [ { name: "cpu" kind: KIND_CPU count: 2 }, { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000 allow_timeout_override: true max_queue_size: 64 }
  priority_queue_policy { key: 1 value: { max_queue_size: 8 } }
}
parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }
model_warmup [ {
  name: "zeros" batch_size: 1 count: 2
  inputs { key: "input__0" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } }
} ]
default_model_filename: "model.pt"
cc_model_filenames { key: "7.5" value: "model_t4.pt" }
optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }
model_transaction_policy { decoupled: false }
response_cache { enable: true }
`

func TestModelConfigParsesPyTorchConfig(t *testing.T) {
	var c ModelConfig
	if err := prototext.Unmarshal([]byte(pytorchConfig), &c); err != nil {
		t.Fatal(err)
	}
	if c.GetMaxBatchSize() != 32 || c.GetInput()[0].GetDataType() != DataType_TYPE_FP32 || len(c.GetInput()[0].GetDims()) != 3 {
		t.Fatalf("inputs: %v", c.GetInput())
	}
	if got := c.GetVersionPolicy().GetSpecific().GetVersions(); len(got) != 2 || got[1] != 3 {
		t.Fatalf("version policy: %v", c.GetVersionPolicy())
	}
	ig := c.GetInstanceGroup()
	if len(ig) != 2 || ig[0].GetKind() != ModelInstanceGroup_KIND_CPU || ig[0].GetCount() != 2 || ig[1].GetGpus()[0] != 0 {
		t.Fatalf("instance groups: %v", ig)
	}
	db := c.GetDynamicBatching()
	if db.GetMaxQueueDelayMicroseconds() != 500 || db.GetDefaultQueuePolicy().GetMaxQueueSize() != 64 || db.GetPriorityQueuePolicy()[1].GetMaxQueueSize() != 8 {
		t.Fatalf("dynamic batching: %v", db)
	}
	if w := c.GetModelWarmup()[0].GetInputs()["input__0"]; !w.GetZeroData() || w.GetDataType() != DataType_TYPE_FP32 {
		t.Fatalf("warmup: %v", c.GetModelWarmup())
	}
	if c.GetParameters()["INFERENCE_MODE"].GetStringValue() != "true" || c.GetCcModelFilenames()["7.5"] != "model_t4.pt" {
		t.Fatalf("parameters: %v %v", c.GetParameters(), c.GetCcModelFilenames())
	}
}

// Stateful and ensemble configurations parse, so that the loader can refuse them by name.
func TestModelConfigParsesSchedulers(t *testing.T) {
	for _, text := range []string{
		`name: "s" sequence_batching { max_sequence_idle_microseconds: 5000000 control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] oldest { max_candidate_sequences: 4 } }`,
		`name: "e" platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }`,
	} {
		var c ModelConfig
		if err := prototext.Unmarshal([]byte(text), &c); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if c.GetSequenceBatching() == nil && c.GetEnsembleScheduling() == nil {
			t.Fatalf("%s: no scheduler parsed", text)
		}
	}
}
