package validate

import (
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A mirror of the KServe v0.17.0 API types that deploy/kserve uses, with their json tags
// copied from github.com/kserve/kserve pkg/apis/serving/v1alpha1/servingruntime_types.go and
// pkg/apis/serving/v1beta1/{inference_service,predictor,predictor_model,component}.go
// (Apache-2.0). The ServingRuntime types are complete. Of the InferenceService, only the
// predictor with a model is mirrored (no framework shortcuts such as sklearn:, no explainer
// or transformer); a manifest that needs more must extend this file. Where KServe copies a
// Kubernetes type (its PodSpec), the k8s.io/api type stands in. The CRD schema check
// (crdschema.go) covers the whole of KServe's API independently of this mirror.

// v1alpha1

type SupportedModelFormat struct {
	Name       string  `json:"name"`
	Version    *string `json:"version,omitempty"`
	AutoSelect *bool   `json:"autoSelect,omitempty"`
	Priority   *int32  `json:"priority,omitempty"`
}

type StorageHelper struct {
	Disabled bool `json:"disabled,omitempty"`
}

type ServingRuntimePodSpec struct {
	Containers       []corev1.Container            `json:"containers"`
	Volumes          []corev1.Volume               `json:"volumes,omitempty"`
	NodeSelector     map[string]string             `json:"nodeSelector,omitempty"`
	Affinity         *corev1.Affinity              `json:"affinity,omitempty"`
	Tolerations      []corev1.Toleration           `json:"tolerations,omitempty"`
	Labels           map[string]string             `json:"labels,omitempty"`
	Annotations      map[string]string             `json:"annotations,omitempty"`
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	HostIPC          bool                          `json:"hostIPC,omitempty"`
	SchedulerName    string                        `json:"schedulerName,omitempty"`
}

type ServingRuntimeSpec struct {
	SupportedModelFormats            []SupportedModelFormat `json:"supportedModelFormats,omitempty"`
	MultiModel                       *bool                  `json:"multiModel,omitempty"`
	Disabled                         *bool                  `json:"disabled,omitempty"`
	ProtocolVersions                 []string               `json:"protocolVersions,omitempty"`
	WorkerSpec                       *RuntimeWorkerSpec     `json:"workerSpec,omitempty"`
	ServingRuntimePodSpec            `json:",inline"`
	GrpcMultiModelManagementEndpoint *string         `json:"grpcEndpoint,omitempty"`
	GrpcDataEndpoint                 *string         `json:"grpcDataEndpoint,omitempty"`
	HTTPDataEndpoint                 *string         `json:"httpDataEndpoint,omitempty"`
	Replicas                         *uint16         `json:"replicas,omitempty"`
	StorageHelper                    *StorageHelper  `json:"storageHelper,omitempty"`
	BuiltInAdapter                   *BuiltInAdapter `json:"builtInAdapter,omitempty"`
}

type BuiltInAdapter struct {
	ServerType                string          `json:"serverType,omitempty"`
	RuntimeManagementPort     int             `json:"runtimeManagementPort,omitempty"`
	MemBufferBytes            int             `json:"memBufferBytes,omitempty"`
	ModelLoadingTimeoutMillis int             `json:"modelLoadingTimeoutMillis,omitempty"`
	Env                       []corev1.EnvVar `json:"env,omitempty"`
}

// RuntimeWorkerSpec is v1alpha1.WorkerSpec.
type RuntimeWorkerSpec struct {
	ServingRuntimePodSpec `json:",inline"`
	PipelineParallelSize  *int `json:"pipelineParallelSize,omitempty"`
	TensorParallelSize    *int `json:"tensorParallelSize,omitempty"`
}

type ServingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServingRuntimeSpec `json:"spec,omitempty"`
}

type ClusterServingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServingRuntimeSpec `json:"spec,omitempty"`
}

// v1beta1

type InferenceService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              InferenceServiceSpec `json:"spec,omitempty"`
}

type InferenceServiceSpec struct {
	Predictor PredictorSpec `json:"predictor"`
}

type PredictorSpec struct {
	Model                  *ModelSpec   `json:"model,omitempty"`
	StorageUris            []StorageURI `json:"storageUris,omitempty"`
	corev1.PodSpec         `json:",inline"`
	ComponentExtensionSpec `json:",inline"`
}

type StorageURI struct {
	URI       string `json:"uri"`
	MountPath string `json:"mountPath"`
}

type ModelFormat struct {
	Name    string  `json:"name"`
	Version *string `json:"version,omitempty"`
}

type ModelSpec struct {
	ModelFormat            ModelFormat `json:"modelFormat"`
	Runtime                *string     `json:"runtime,omitempty"`
	PredictorExtensionSpec `json:",inline"`
}

type PredictorExtensionSpec struct {
	StorageURI       *string `json:"storageUri,omitempty"`
	RuntimeVersion   *string `json:"runtimeVersion,omitempty"`
	ProtocolVersion  *string `json:"protocolVersion,omitempty"`
	corev1.Container `json:",inline"`
	Storage          *ModelStorageSpec `json:"storage,omitempty"`
}

type StorageSpec struct {
	Path       *string            `json:"path,omitempty"`
	Parameters *map[string]string `json:"parameters,omitempty"`
	StorageKey *string            `json:"key,omitempty"`
}

type ModelStorageSpec struct {
	StorageSpec `json:",inline"`
	SchemaPath  *string `json:"schemaPath,omitempty"`
}

type ComponentExtensionSpec struct {
	MinReplicas          *int32                     `json:"minReplicas,omitempty"`
	MaxReplicas          int32                      `json:"maxReplicas,omitempty"`
	ScaleTarget          *int32                     `json:"scaleTarget,omitempty"`
	ScaleMetric          *string                    `json:"scaleMetric,omitempty"`
	ScaleMetricType      *string                    `json:"scaleMetricType,omitempty"`
	AutoScaling          *AutoScalingSpec           `json:"autoScaling,omitempty"`
	ContainerConcurrency *int64                     `json:"containerConcurrency,omitempty"`
	TimeoutSeconds       *int64                     `json:"timeout,omitempty"`
	CanaryTrafficPercent *int64                     `json:"canaryTrafficPercent,omitempty"`
	Logger               *LoggerSpec                `json:"logger,omitempty"`
	Batcher              *Batcher                   `json:"batcher,omitempty"`
	Labels               map[string]string          `json:"labels,omitempty"`
	Annotations          map[string]string          `json:"annotations,omitempty"`
	DeploymentStrategy   *appsv1.DeploymentStrategy `json:"deploymentStrategy,omitempty"`
}

type AutoScalingSpec struct {
	Metrics  []MetricsSpec                                  `json:"metrics,omitempty"`
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

type MetricsSpec struct {
	Type      string                `json:"type"`
	Resource  *ResourceMetricSource `json:"resource,omitempty"`
	External  *ExternalMetricSource `json:"external,omitempty"`
	PodMetric *PodMetricSource      `json:"podmetric,omitempty"`
}

type ResourceMetricSource struct {
	Name   string       `json:"name"`
	Target MetricTarget `json:"target"`
}

type ExternalMetricSource struct {
	Metric         ExternalMetrics          `json:"metric"`
	Authentication *ExtMetricAuthentication `json:"authenticationRef,omitempty"`
	Target         MetricTarget             `json:"target"`
}

type PodMetricSource struct {
	Metric PodMetrics   `json:"metric"`
	Target MetricTarget `json:"target"`
}

type AuthenticationRef struct {
	Name string `json:"name"`
}

type ExtMetricAuthentication struct {
	AuthenticationRef AuthenticationRef `json:"authenticationRef"`
	AuthModes         string            `json:"authModes,omitempty"`
}

// MetricTarget's quantities are KServe's MetricQuantity, a resource.Quantity that keeps the
// original string; the JSON forms are the same.
type MetricTarget struct {
	Type               string             `json:"type"`
	Value              *resource.Quantity `json:"value,omitempty"`
	AverageValue       *resource.Quantity `json:"averageValue,omitempty"`
	AverageUtilization *int32             `json:"averageUtilization,omitempty"`
}

type ExternalMetrics struct {
	Backend       string `json:"backend"`
	ServerAddress string `json:"serverAddress,omitempty"`
	Query         string `json:"query,omitempty"`
	Namespace     string `json:"namespace,omitempty"`
}

type PodMetrics struct {
	Backend           string   `json:"backend"`
	ServerAddress     string   `json:"serverAddress,omitempty"`
	MetricNames       []string `json:"metricNames,omitempty"`
	Query             string   `json:"query,omitempty"`
	OperationOverTime string   `json:"operationOverTime,omitempty"`
}

type LoggerStorageSpec struct {
	StorageSpec        `json:",inline"`
	ServiceAccountName *string `json:"serviceAccountName,omitempty"`
}

type LoggerSpec struct {
	URL                 *string            `json:"url,omitempty"`
	Mode                string             `json:"mode,omitempty"`
	MetadataHeaders     []string           `json:"metadataHeaders,omitempty"`
	MetadataAnnotations []string           `json:"metadataAnnotations,omitempty"`
	Storage             *LoggerStorageSpec `json:"storage,omitempty"`
	MarshallerURL       *string            `json:"marshallerUrl,omitempty"`
	BatchSize           *int               `json:"batchSize,omitempty"`
	BatchInterval       *string            `json:"batchInterval,omitempty"`
}

type Batcher struct {
	MaxBatchSize *int `json:"maxBatchSize,omitempty"`
	MaxLatency   *int `json:"maxLatency,omitempty"`
	Timeout      *int `json:"timeout,omitempty"`
}

// The Prometheus adapter's configuration (kubernetes-sigs/prometheus-adapter
// pkg/config/config.go, Apache-2.0), the file in the adapter-config ConfigMap.

type AdapterConfig struct {
	Rules         []AdapterRule  `json:"rules"`
	ResourceRules *ResourceRules `json:"resourceRules,omitempty"`
	ExternalRules []AdapterRule  `json:"externalRules,omitempty"`
}

type AdapterRule struct {
	SeriesQuery            string                  `json:"seriesQuery"`
	SeriesFilters          []RegexFilter           `json:"seriesFilters"`
	Resources              ResourceMapping         `json:"resources"`
	Name                   NameMapping             `json:"name"`
	MetricsQuery           string                  `json:"metricsQuery,omitempty"`
	LabelValueReplacements []LabelValueReplacement `json:"labelValueReplacements,omitempty"`
}

type LabelValueReplacement struct {
	Find    string `json:"find,omitempty"`
	Replace string `json:"replace,omitempty"`
}

type RegexFilter struct {
	Is    string `json:"is,omitempty"`
	IsNot string `json:"isNot,omitempty"`
}

type ResourceMapping struct {
	Template  string                   `json:"template,omitempty"`
	Overrides map[string]GroupResource `json:"overrides,omitempty"`
}

type GroupResource struct {
	Group    string `json:"group,omitempty"`
	Resource string `json:"resource"`
}

type NameMapping struct {
	Matches string `json:"matches"`
	As      string `json:"as"`
}

type ResourceRules struct {
	CPU    ResourceRule `json:"cpu"`
	Memory ResourceRule `json:"memory"`
	Window string       `json:"window"`
}

type ResourceRule struct {
	ContainerQuery string          `json:"containerQuery"`
	NodeQuery      string          `json:"nodeQuery"`
	Resources      ResourceMapping `json:"resources"`
	ContainerLabel string          `json:"containerLabel"`
}
