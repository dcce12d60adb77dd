"""An MNIST handler that counts and times its work through TorchServe's context.metrics, the
way a TorchServe user's custom metrics do: metrics declared in metrics.yaml (fetched with
get_metric, or cached with add_metric_to_cache), and others only auto-detection serves."""
from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.image_classifier import ImageClassifier
from torchvision import transforms


class CountingDigits(ImageClassifier):
    image_processing = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])

    def initialize(self, context):
        super().initialize(context)
        self.requests = context.metrics.add_metric_to_cache(
            metric_name="DigitRequests", unit="count", dimension_names=[], metric_type=MetricTypes.COUNTER)
        context.metrics.add_metric(name="DigitLoads", value=1, unit="count", metric_type=MetricTypes.COUNTER)

    def preprocess(self, data):
        metrics = self.context.metrics
        self.requests.add_or_update(value=len(data), dimension_values=[])
        metrics.get_metric(metric_name="DigitBatch", metric_type=MetricTypes.GAUGE).add_or_update(
            value=len(data), dimension_values=[self.context.model_name])
        metrics.add_size(name="DigitBytes", value=len(data[0].get("body")) / 1024, idx=None, unit="kB")
        # Declared nowhere: served only with model_metrics_auto_detect.
        metrics.add_time(name="DigitStepTime", value=2.5, idx=None, unit="ms",
                         dimensions=[Dimension(name="Step", value="preprocess")], metric_type=MetricTypes.GAUGE)
        metrics.add_percent(name="DigitShare", value=50, idx=None, dimensions=[], metric_type=MetricTypes.HISTOGRAM)
        return super().preprocess(data)

    def postprocess(self, data):
        return data.argmax(1).tolist()
