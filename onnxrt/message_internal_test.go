package onnxrt

import "testing"

func TestCleanMessage(t *testing.T) {
	for in, want := range map[string]string{
		"Load model from m.onnx failed:/onnxruntime_src/onnxruntime/core/graph/model.cc:256 onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&, const onnxruntime::IOnnxRuntimeOpSchemaRegistryList*, const onnxruntime::logging::Logger&, const onnxruntime::ModelOptions&) Unsupported model IR version: 14, max supported IR version: 13": "Load model from m.onnx failed:Unsupported model IR version: 14, max supported IR version: 13",
		"tensorprotoutils.cc:1534 ValidateEmbeddedTensorProtoDataSizeAndShape Initializer 'w': raw_data size":                                                                                            "Initializer 'w': raw_data size",
		"Deserialize tensor w failed.tensorprotoutils.cc:1876 GetExtDataFromTensorProto External initializer: w":                                                                                         "Deserialize tensor w failed.External initializer: w",
		"Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:360 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*) Available memory of 67108608": "Status Message: Available memory of 67108608",
		"/onnxruntime_src/onnxruntime/core/common/safeint.h:17 static void SafeIntExceptionHandler<onnxruntime::OnnxRuntimeException>::SafeIntOnOverflow() Integer overflow":                             "Integer overflow",
		"plain message":                        "plain message",
		"boom\nStacktrace:\n#0 somewhere.cc:1": "boom",
	} {
		if got := cleanMessage(in); got != want {
			t.Errorf("cleanMessage(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}
