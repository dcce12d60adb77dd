// The manifests' checks, one file over 600 lines on purpose: each test is a table of real
// documents and their misspellings, and they share the schema loaders at the top.
package validate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	deployDir = ".."    // deploy/
	repoRoot  = "../.." // the torchd repository
)

// manifestDirs are the trees under deploy/ that hold manifests.
var manifestDirs = []string{"kubernetes", "kserve"}

func loadAll(t *testing.T) []Document {
	t.Helper()
	docs, err := LoadTree(deployDir, manifestDirs...)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func settings(t *testing.T) map[string][]string {
	t.Helper()
	s, err := Settings(filepath.Join(repoRoot, "daemon", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func all[T any](docs []Document) []*T {
	var out []*T
	for _, d := range docs {
		if o, ok := d.Object.(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

func one[T any](t *testing.T, docs []Document) *T {
	t.Helper()
	objs := all[T](docs)
	if len(objs) == 0 {
		var zero T
		t.Fatalf("no %T among the manifests", zero)
	}
	return objs[0]
}

func TestManifestsDecodeStrictly(t *testing.T) {
	docs := loadAll(t)
	count := map[string]int{}
	for _, d := range docs {
		count[d.Kind]++
		t.Logf("%s: ok", d)
	}
	want := map[string]int{
		"apps/v1/Deployment":                               2, // cpu and gpu
		"v1/Service":                                       1,
		"v1/ConfigMap":                                     2, // torchd.toml and the adapter's rules
		"policy/v1/PodDisruptionBudget":                    1,
		"autoscaling/v2/HorizontalPodAutoscaler":           1,
		"serving.kserve.io/v1alpha1/ClusterServingRuntime": 2, // torchd's layout and TorchServe's
		"serving.kserve.io/v1beta1/InferenceService":       1,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d documents, want %d", k, count[k], n)
		}
	}
}

var (
	crdOnce    sync.Once
	crdSchemas map[string]map[string]*Schema
	crdErr     error
)

// kserveSchema returns the CRD schema for a KServe document's kind and version, from
// KServe's module (fetched once per test run through the module proxy; not committed).
func kserveSchema(t *testing.T, kind string) *Schema {
	t.Helper()
	crdOnce.Do(func() { crdSchemas, crdErr = KServeCRDSchemas(KServeVersion) })
	if crdErr != nil {
		t.Skipf("KServe's CRD schemas are not available (the module proxy cannot be reached?): %v", crdErr)
	}
	parts := strings.Split(kind, "/") // group, version, Kind
	plural := strings.ToLower(parts[2]) + "s"
	s := crdSchemas[plural][parts[1]]
	if s == nil {
		t.Fatalf("%s: the CRD has no version %s", plural, parts[1])
	}
	return s
}

func TestKServeManifestsMatchCRDSchemas(t *testing.T) {
	n := 0
	for _, d := range loadAll(t) {
		if !strings.HasPrefix(d.Kind, "serving.kserve.io/") {
			continue
		}
		n++
		if err := CheckSchema(d.JSON, kserveSchema(t, d.Kind)); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if n == 0 {
		t.Fatal("no KServe manifests found")
	}
}

// TestMisspelledFieldsFail proves the checks bite: each case misspells one field of a real
// manifest, and decoding must fail naming it. The KServe cases must fail twice, against the
// Go mirror and against KServe's CRD schema, each on its own.
func TestMisspelledFieldsFail(t *testing.T) {
	cases := []struct {
		file, old, new string
	}{
		{"kubernetes/cpu/deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		{"kubernetes/cpu/deployment.yaml", "readinessProbe:", "readynessProbe:"},
		{"kubernetes/cpu/deployment.yaml", "mountPath: /etc/torchd", "mountpath: /etc/torchd"}, // case matters
		{"kubernetes/gpu/deployment.yaml", "tolerations:", "toleration:"},
		{"kubernetes/common/service.yaml", "targetPort: http", "targetport: http"},
		{"kubernetes/common/hpa.yaml", "averageUtilization:", "averageUtilisation:"},
		{"kubernetes/common/pdb.yaml", "unhealthyPodEvictionPolicy:", "unhealthyPodEvictionPolicies:"},
		{"kubernetes/common/configmap.yaml", "\ndata:", "\ndate:"},
		{"kserve/clusterservingruntime.yaml", "protocolVersions:", "protocolVersion:"},
		{"kserve/clusterservingruntime.yaml", "readinessProbe:", "readinesProbe:"},
		{"kserve/inferenceservice.yaml", "storageUri:", "storageURI:"},
		{"kserve/torchserve-layout.yaml", "autoSelect:", "autoselect:"},
		{"kserve/inferenceservice.yaml", "averageUtilization:", "averageUtilisation:"},
		{"kserve/inferenceservice.yaml", "serverAddress:", "server_address:"},
	}
	for _, c := range cases {
		t.Run(c.file+":"+c.new, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(deployDir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), c.old) {
				t.Fatalf("%q not in %s: update this case", c.old, c.file)
			}
			bad := strings.Replace(string(b), c.old, c.new, 1)
			field := strings.TrimSuffix(strings.Fields(c.new)[0], ":")
			failed := false
			for i, y := range SplitDocuments([]byte(bad)) {
				d, err := LoadDocument(c.file, i, y)
				if err != nil {
					failed = true
					if !strings.Contains(err.Error(), field) {
						t.Errorf("the error does not name %q: %v", field, err)
					}
					t.Logf("typed decode: %v", err)
				}
				if strings.HasPrefix(d.Kind, "serving.kserve.io/") {
					err := CheckSchema(d.JSON, kserveSchema(t, d.Kind))
					if err == nil || !strings.Contains(err.Error(), field) {
						t.Errorf("KServe's CRD schema did not refuse %q: %v", field, err)
					}
					t.Logf("CRD schema: %v", err)
				}
			}
			if !failed {
				t.Errorf("a manifest with %q instead of %q decoded without error", c.new, c.old)
			}
		})
	}
}

func TestDuplicateKeysFail(t *testing.T) {
	y := "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n"
	if _, err := LoadDocument("dup.yaml", 0, []byte(y)); err == nil {
		t.Fatal("a document with a duplicate key decoded")
	}
}

// torchdContainer returns the container running torchd in a Deployment.
func torchdContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "torchd" {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("deployment %s has no torchd container", d.Name)
	return nil
}

// configFor returns the torchd.toml a Deployment mounts, with its container's environment
// applied over it as torchd applies it.
func configFor(t *testing.T, docs []Document, d *appsv1.Deployment) (TorchdTOML, *corev1.ConfigMap) {
	t.Helper()
	c := torchdContainer(t, d)
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == "/etc/torchd" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("%s: nothing mounted at /etc/torchd, where the image's TORCHD_CONFIG points", d.Name)
	}
	var cmName string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
			found := false
			for _, it := range v.ConfigMap.Items {
				found = found || (it.Key == "torchd.toml" && it.Path == "torchd.toml")
			}
			if !found {
				t.Errorf("%s: volume %s does not put the key torchd.toml at torchd.toml", d.Name, v.Name)
			}
		}
	}
	for _, cm := range all[corev1.ConfigMap](docs) {
		if cm.Name != cmName {
			continue
		}
		cfg, err := ParseTorchdTOML(cm.Data["torchd.toml"], settings(t))
		if err != nil {
			t.Fatalf("ConfigMap %s: torchd.toml: %v", cm.Name, err)
		}
		return cfg, cm
	}
	t.Fatalf("%s: ConfigMap %q not among the manifests", d.Name, cmName)
	return nil, nil
}

func preStopSleep(t *testing.T, c *corev1.Container) time.Duration {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	if s := c.Lifecycle.PreStop.Sleep; s != nil {
		return time.Duration(s.Seconds) * time.Second
	}
	if e := c.Lifecycle.PreStop.Exec; e != nil && len(e.Command) == 2 && e.Command[0] == "sleep" {
		d, err := Duration(e.Command[1], time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Fatalf("container %s: a preStop hook other than a sleep: %+v", c.Name, c.Lifecycle.PreStop)
	return 0
}

// checkDrain: SIGKILL comes terminationGracePeriodSeconds after the pod starts terminating,
// which covers the preStop hook too. torchd must get its whole shutdown_timeout after it.
func checkDrain(t *testing.T, what string, grace *int64, preStop time.Duration, shutdown string) {
	t.Helper()
	if grace == nil {
		t.Errorf("%s: no terminationGracePeriodSeconds (Kubernetes' default is 30 s)", what)
		return
	}
	sd, err := Duration(shutdown, time.Second)
	if err != nil {
		t.Fatalf("%s: shutdown_timeout: %v", what, err)
	}
	g := time.Duration(*grace) * time.Second
	if g < preStop+sd+time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %v does not cover preStop %v + shutdown_timeout %v", what, g, preStop, sd)
	}
	if preStop < 5*time.Second {
		t.Errorf("%s: preStop sleep %v is too short for endpoints to deregister", what, preStop)
	}
	t.Logf("%s: grace %v ≥ preStop %v + shutdown_timeout %v", what, g, preStop, sd)
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	fmt.Sscan(p, &n)
	return n
}

func containerPort(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func TestDeployments(t *testing.T) {
	docs := loadAll(t)
	deps := all[appsv1.Deployment](docs)
	for _, d := range deps {
		t.Run(d.Name+"/"+torchdContainer(t, d).Image, func(t *testing.T) {
			c := torchdContainer(t, d)
			cfg, _ := configFor(t, docs, d)
			envKeys := envSettings(t, c.Env)
			for k := range envKeys {
				if _, ok := cfg[k]; ok {
					t.Errorf("env sets %s, which hides torchd.toml's %s = %q", k, k, cfg[k])
				}
				cfg[k] = envKeys[k]
			}
			if len(c.Args) > 0 || len(c.Command) > 0 {
				t.Errorf("args/command %v %v: the image's entrypoint and torchd.toml configure torchd", c.Command, c.Args)
			}

			checkDrain(t, d.Name, d.Spec.Template.Spec.TerminationGracePeriodSeconds, preStopSleep(t, c), cfg["shutdown_timeout"])

			// Addresses: inference and metrics reachable at the pod IP, management not.
			for _, k := range []string{"inference_address", "metrics_address"} {
				if h, _, _ := net.SplitHostPort(cfg[k]); h != "0.0.0.0" && h != "" {
					t.Errorf("%s = %q: the pod's IP must reach it", k, cfg[k])
				}
			}
			if h, _, _ := net.SplitHostPort(cfg["management_address"]); h != "127.0.0.1" && h != "localhost" && cfg["enable_token_authorization"] != "true" {
				t.Errorf("management_address = %q without token authorization", cfg["management_address"])
			}
			if cfg["enable_snapshots"] != "false" {
				t.Errorf("enable_snapshots = %q: the model list is declared, pods are replaced", cfg["enable_snapshots"])
			}
			if containerPort(c, "http") != port(t, cfg["inference_address"]) || containerPort(c, "metrics") != port(t, cfg["metrics_address"]) {
				t.Errorf("container ports %v do not match inference_address %s and metrics_address %s", c.Ports, cfg["inference_address"], cfg["metrics_address"])
			}
			if a := d.Spec.Template.Annotations["prometheus.io/port"]; a != fmt.Sprint(port(t, cfg["metrics_address"])) {
				t.Errorf("prometheus.io/port %q is not metrics_address's port", a)
			}

			// The model store is a volume, filled before torchd starts.
			store := cfg["model_store"]
			mounted := false
			for _, m := range c.VolumeMounts {
				mounted = mounted || m.MountPath == store
			}
			if !mounted {
				t.Errorf("model_store %q is not a mounted volume", store)
			}
			if len(d.Spec.Template.Spec.InitContainers) == 0 {
				t.Errorf("no init container fills the model store")
			}

			// Probes: readiness on warm models, liveness on the cheap always-true endpoint.
			rp, lp := c.ReadinessProbe, c.LivenessProbe
			if rp == nil || rp.HTTPGet == nil || (rp.HTTPGet.Path != "/ping" && rp.HTTPGet.Path != "/v2/health/ready") {
				t.Errorf("readiness probe %+v: want an HTTP GET of /ping or /v2/health/ready", rp)
			}
			if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/v2/health/live" {
				t.Errorf("liveness probe %+v: want /v2/health/live (/ping is 500 during warm-up)", lp)
			} else if lp.FailureThreshold*lp.PeriodSeconds < 30 {
				t.Errorf("liveness gives up after %d s: too eager for a saturated pod", lp.FailureThreshold*lp.PeriodSeconds)
			}
			for _, p := range []*corev1.Probe{rp, lp} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "http" && p.HTTPGet.Port.IntVal != port(t, cfg["inference_address"]) {
					t.Errorf("probe port %v is not the inference port", p.HTTPGet.Port.String())
				}
			}

			// Resources: requests and limits; intra-op threads within the CPU limit.
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("no %s request", r)
				}
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("no %s limit", r)
				}
			}
			var threads, workers int64
			fmt.Sscan(cfg["threads"], &threads)
			fmt.Sscan(cfg["workers"], &workers)
			cpu := c.Resources.Limits.Cpu().MilliValue()
			if threads == 0 || threads*max(workers, 1)*1000 > cpu {
				t.Errorf("threads %d × workers %d do not fit the CPU limit %dm (threads 0 sizes from the node, not the limit)", threads, workers, cpu)
			}
			if strings.Contains(c.Image, "cuda") {
				if g := c.Resources.Limits["nvidia.com/gpu"]; g.Value() < 1 {
					t.Errorf("a CUDA image without an nvidia.com/gpu limit")
				}
				if cfg["device"] == "" || !strings.HasPrefix(cfg["device"], "cuda") {
					t.Errorf("a CUDA image with device %q", cfg["device"])
				}
			}
		})
	}
	if len(deps) == 0 {
		t.Fatal("no Deployments")
	}
}

// envSettings maps a container's environment to torchd settings keys.
func envSettings(t *testing.T, env []corev1.EnvVar) map[string]string {
	out := map[string]string{}
	s := settings(t)
	for _, e := range env {
		for key, names := range s {
			for _, n := range names {
				if n == e.Name {
					out[key] = e.Value
				}
			}
		}
	}
	return out
}

// TestImageDefaultsLeaveConfigMapInCharge: an ENV line in the image beats torchd.toml, so
// the image must not set what the ConfigMap sets, and must point TORCHD_CONFIG at the
// ConfigMap's mount.
func TestImageDefaultsLeaveConfigMapInCharge(t *testing.T) {
	docs := loadAll(t)
	s := settings(t)
	cfg, _ := configFor(t, docs, one[appsv1.Deployment](t, docs))
	envLine := regexp.MustCompile(`(?m)^ENV\s+((?:.*\\\n)*.*)$`)
	pair := regexp.MustCompile(`([A-Z_][A-Z0-9_]*)=(\S+)`)
	for _, df := range []string{"Dockerfile.cpu", "Dockerfile.cuda"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, df))
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, m := range envLine.FindAllStringSubmatch(string(b), -1) {
			for _, p := range pair.FindAllStringSubmatch(m[1], -1) {
				env[p[1]] = p[2]
			}
		}
		if env["TORCHD_CONFIG"] != "/etc/torchd/torchd.toml" {
			t.Errorf("%s: TORCHD_CONFIG = %q, want /etc/torchd/torchd.toml (the ConfigMap's mount)", df, env["TORCHD_CONFIG"])
		}
		for key, names := range s {
			for _, n := range names {
				if _, set := env[n]; set {
					if _, inMap := cfg[key]; inMap {
						t.Errorf("%s: ENV %s hides the ConfigMap's %s", df, n, key)
					}
				}
			}
		}
		if !strings.Contains(string(b), "COPY deploy/docker/torchd.toml /etc/torchd/torchd.toml") {
			t.Errorf("%s does not install deploy/docker/torchd.toml", df)
		}
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "docker", "torchd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTorchdTOML(string(b), s); err != nil {
		t.Errorf("deploy/docker/torchd.toml: %v", err)
	}
}

func TestServicePDBAndHPATargetTheDeployment(t *testing.T) {
	docs := loadAll(t)
	svc := one[corev1.Service](t, docs)
	pdb := one[policyv1.PodDisruptionBudget](t, docs)
	hpa := one[autoscalingv2.HorizontalPodAutoscaler](t, docs)
	pdbSel, err := metav1LabelSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all[appsv1.Deployment](docs) {
		pod := labels.Set(d.Spec.Template.Labels)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
			t.Errorf("Service %s does not select %s's pods", svc.Name, d.Name)
		}
		if !pdbSel.Matches(pod) {
			t.Errorf("PodDisruptionBudget %s does not select %s's pods", pdb.Name, d.Name)
		}
		depSel, err := metav1LabelSelector(d.Spec.Selector)
		if err != nil || !depSel.Matches(pod) {
			t.Errorf("Deployment %s's selector does not match its own pods (%v)", d.Name, err)
		}
		if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name || hpa.Spec.ScaleTargetRef.APIVersion != "apps/v1" {
			t.Errorf("HPA targets %+v, not Deployment %s", hpa.Spec.ScaleTargetRef, d.Name)
		}
		c := torchdContainer(t, d)
		for _, p := range svc.Spec.Ports {
			if containerPort(c, p.TargetPort.StrVal) == 0 {
				t.Errorf("Service port %s targets %q, which %s's container does not name", p.Name, p.TargetPort.String(), d.Name)
			}
		}
		if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("%s: a rollout may drop capacity (maxUnavailable ≠ 0)", d.Name)
		}
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA minReplicas %v: one pod cannot be drained without an outage", hpa.Spec.MinReplicas)
	}
}

// TestAutoscalerSignal: the HPA scales on torchd_queue_depth per pod, which the Prometheus
// adapter's rule serves under that name, from the metric torchd really exports; CPU is there
// as the fallback.
func TestAutoscalerSignal(t *testing.T) {
	docs := loadAll(t)
	hpa := one[autoscalingv2.HorizontalPodAutoscaler](t, docs)
	var podsMetric string
	var hasCPU bool
	for _, m := range hpa.Spec.Metrics {
		switch {
		case m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil:
			podsMetric = m.Pods.Metric.Name
			if m.Pods.Target.Type != autoscalingv2.AverageValueMetricType || m.Pods.Target.AverageValue == nil {
				t.Errorf("pods metric target %+v: want an AverageValue per pod", m.Pods.Target)
			}
		case m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU:
			hasCPU = true
		}
	}
	if podsMetric == "" || !hasCPU {
		t.Fatalf("HPA metrics %+v: want a Pods metric and CPU", hpa.Spec.Metrics)
	}
	var served bool
	for _, cm := range all[corev1.ConfigMap](docs) {
		y, ok := cm.Data["config.yaml"]
		if !ok {
			continue
		}
		var cfg AdapterConfig
		if err := DecodeStrict([]byte(y), &cfg); err != nil {
			t.Fatalf("ConfigMap %s: config.yaml: %v", cm.Name, err)
		}
		for _, r := range cfg.Rules {
			if r.Name.As == podsMetric && regexp.MustCompile(r.Name.Matches).MatchString(podsMetric) && strings.Contains(r.SeriesQuery, podsMetric) {
				served = true
				if r.Resources.Overrides["pod"].Resource != "pod" || r.Resources.Overrides["namespace"].Resource != "namespace" {
					t.Errorf("rule for %s does not map its pod and namespace labels", podsMetric)
				}
			}
		}
	}
	if !served {
		t.Errorf("no Prometheus adapter rule serves %s", podsMetric)
	}
	metricsGo, err := os.ReadFile(filepath.Join(repoRoot, "frontend", "metrics", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metricsGo), `"`+podsMetric+`"`) && !strings.Contains(string(metricsGo), `"`+podsMetric+`{`) {
		t.Errorf("torchd does not export %s (frontend/metrics/metrics.go)", podsMetric)
	}
	isvc := one[InferenceService](t, docs)
	found := false
	for _, m := range isvc.Spec.Predictor.AutoScaling.Metrics {
		found = found || (m.External != nil && strings.Contains(m.External.Metric.Query, podsMetric+"{"))
	}
	if !found {
		t.Errorf("InferenceService %s does not scale on %s", isvc.Name, podsMetric)
	}
}

// TestAdapterConfigIsStrict: the adapter's rules, embedded as text, are decoded strictly too.
func TestAdapterConfigIsStrict(t *testing.T) {
	y := "rules:\n- seriesQuery: 'x'\n  resources: {overrides: {pod: {resource: pod}}}\n  name: {matches: x, as: x}\n  metricQuery: 'sum(x)'\n"
	err := DecodeStrict([]byte(y), new(AdapterConfig))
	if err == nil || !strings.Contains(err.Error(), "metricQuery") {
		t.Fatalf("metricQuery (for metricsQuery) was not refused: %v", err)
	}
}

// runtime is the ClusterServingRuntime named name.
func runtime(t *testing.T, docs []Document, name string) *ClusterServingRuntime {
	t.Helper()
	for _, rt := range all[ClusterServingRuntime](docs) {
		if rt.Name == name {
			return rt
		}
	}
	t.Fatalf("no ClusterServingRuntime %s", name)
	return nil
}

// The runtime for TorchServe's layout reads config/config.properties and model-store/ where
// KServe's storage initializer puts them, serves both protocols on 8080, and takes KServe's
// pytorch format by default.
func TestKServeTorchServeLayoutRuntime(t *testing.T) {
	rt := runtime(t, loadAll(t), "kserve-torchd-torchserve")
	spec := rt.Spec
	if fmt.Sprint(spec.ProtocolVersions) != "[v1 v2]" {
		t.Errorf("protocolVersions %v, want v1 and v2", spec.ProtocolVersions)
	}
	if len(spec.SupportedModelFormats) != 1 || spec.SupportedModelFormats[0].Name != "pytorch" ||
		spec.SupportedModelFormats[0].AutoSelect == nil || !*spec.SupportedModelFormats[0].AutoSelect {
		t.Errorf("supportedModelFormats %+v: want pytorch, auto-selected", spec.SupportedModelFormats)
	}
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "kserve-container" {
		t.Fatalf("want one container named kserve-container, KServe's convention")
	}
	c := &spec.Containers[0]
	flags, err := ParseFlags(c.Args, settings(t))
	if err != nil {
		t.Fatalf("args: %v", err)
	}
	if flags["ts_config"] != "/mnt/models/config/config.properties" || flags["model_store"] != "/mnt/models/model-store" {
		t.Errorf("args %v: want --ts-config and --model-store under /mnt/models, as KServe's TorchServe layout has them", c.Args)
	}
	if flags["models"] != "" {
		t.Errorf("--models would load archives beside config.properties' model_snapshot")
	}
	if h, _, _ := net.SplitHostPort(flags["management_address"]); h != "127.0.0.1" {
		t.Errorf("management_address %q beyond the pod's loopback", flags["management_address"])
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != port(t, flags["inference_address"]) || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %v: KServe routes to 8080, which must be inference_address", c.Ports)
	}
	if a := spec.Annotations["prometheus.kserve.io/port"]; a != fmt.Sprint(port(t, flags["metrics_address"])) {
		t.Errorf("prometheus.kserve.io/port %q is not metrics_address's port", a)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/v2/health/live" {
		t.Errorf("probes: want /v2/health/ready and /v2/health/live")
	}
}

func TestKServeRuntime(t *testing.T) {
	docs := loadAll(t)
	rt := runtime(t, docs, "kserve-torchd")
	isvc := one[InferenceService](t, docs)
	spec := rt.Spec
	for _, want := range []string{"v1", "v2"} {
		found := false
		for _, p := range spec.ProtocolVersions {
			found = found || p == want
		}
		if !found {
			t.Errorf("protocolVersions %v lacks %s", spec.ProtocolVersions, want)
		}
	}
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "kserve-container" {
		t.Fatalf("want one container named kserve-container, KServe's convention")
	}
	c := &spec.Containers[0]
	flags, err := ParseFlags(c.Args, settings(t))
	if err != nil {
		t.Fatalf("args: %v", err)
	}
	if flags["model_store"] != "/mnt/models" || flags["models"] != "all" {
		t.Errorf("args %v: want --model-store=/mnt/models --models=all, where KServe's storage initializer puts the model", c.Args)
	}
	if flags["enable_snapshots"] != "false" {
		t.Errorf("snapshots on in a KServe pod")
	}
	if h, _, _ := net.SplitHostPort(flags["management_address"]); h != "127.0.0.1" {
		t.Errorf("management_address %q beyond the pod's loopback", flags["management_address"])
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != port(t, flags["inference_address"]) || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %v: KServe (and Knative) route to one port, 8080, which must be inference_address", c.Ports)
	}
	if a := spec.Annotations["prometheus.kserve.io/port"]; a != fmt.Sprint(port(t, flags["metrics_address"])) {
		t.Errorf("prometheus.kserve.io/port %q is not metrics_address's port", a)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" {
		t.Errorf("readiness probe: want /v2/health/ready")
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/v2/health/live" {
		t.Errorf("liveness probe: want /v2/health/live")
	}
	checkDrain(t, "InferenceService "+isvc.Name, isvc.Spec.Predictor.TerminationGracePeriodSeconds, preStopSleep(t, c), flags["shutdown_timeout"])
	var threads int64
	fmt.Sscan(flags["threads"], &threads)
	if threads == 0 || threads*1000 > c.Resources.Limits.Cpu().MilliValue() {
		t.Errorf("threads %d do not fit the CPU limit %v", threads, c.Resources.Limits.Cpu())
	}

	m := isvc.Spec.Predictor.Model
	if m == nil || m.Runtime == nil || *m.Runtime != rt.Name {
		t.Fatalf("InferenceService %s does not name runtime %s", isvc.Name, rt.Name)
	}
	supported := false
	for _, f := range spec.SupportedModelFormats {
		supported = supported || (f.Name == m.ModelFormat.Name && (m.ModelFormat.Version == nil || (f.Version != nil && *f.Version == *m.ModelFormat.Version)))
	}
	if !supported || m.ModelFormat.Name != "pytorch" {
		t.Errorf("model format %+v is not pytorch as the runtime supports it", m.ModelFormat)
	}
	if m.ProtocolVersion != nil && *m.ProtocolVersion != "v1" && *m.ProtocolVersion != "v2" {
		t.Errorf("protocolVersion %s", *m.ProtocolVersion)
	}
	if m.StorageURI == nil {
		t.Errorf("no storageUri: nothing would fill /mnt/models")
	}
}

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}
