package tracing

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OpenTelemetry SDK reads more OTEL_* variables than torchd's settings name, and trusts
// them: OTEL_BSP_MAX_QUEUE_SIZE=-5 panics in makeslice, 2000000000 allocates the queue until
// the process dies, a negative OTEL_BSP_SCHEDULE_DELAY spins the exporter. Each such value
// is read here, checked against a range as torchd's own settings are, and handed to the SDK
// as an option, which wins over its own read; a value out of range is a warning, and the
// default is used.

// envLimit is one numeric OTEL_* variable: its range and default.
type envLimit struct {
	keys     []string // the first one set is read, as the SDK reads them
	min, max int
	def      int
	unit     string // "ms" for durations, "" for counts
}

var (
	bspQueueSize     = envLimit{[]string{"OTEL_BSP_MAX_QUEUE_SIZE"}, 1, 1 << 16, sdktrace.DefaultMaxQueueSize, ""}
	bspBatchSize     = envLimit{[]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE"}, 1, 1 << 16, sdktrace.DefaultMaxExportBatchSize, ""}
	bspScheduleDelay = envLimit{[]string{"OTEL_BSP_SCHEDULE_DELAY"}, 10, 3_600_000, sdktrace.DefaultScheduleDelay, "ms"}
	bspExportTimeout = envLimit{[]string{"OTEL_BSP_EXPORT_TIMEOUT"}, 1, 600_000, sdktrace.DefaultExportTimeout, "ms"}
	exportTimeout    = envLimit{[]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}, 1, 600_000, 10_000, "ms"}
	// Span limits: -1 is the SDK's "no limit" for a value's length; counts are bounded.
	attrValueLength = envLimit{[]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"}, -1, 1 << 20, sdktrace.DefaultAttributeValueLengthLimit, ""}
	attrCount       = envLimit{[]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"}, 0, 1 << 12, sdktrace.DefaultAttributeCountLimit, ""}
	eventCount      = envLimit{[]string{"OTEL_SPAN_EVENT_COUNT_LIMIT"}, 0, 1 << 12, sdktrace.DefaultEventCountLimit, ""}
	eventAttrCount  = envLimit{[]string{"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT"}, 0, 1 << 12, sdktrace.DefaultAttributePerEventCountLimit, ""}
	linkCount       = envLimit{[]string{"OTEL_SPAN_LINK_COUNT_LIMIT"}, 0, 1 << 12, sdktrace.DefaultLinkCountLimit, ""}
	linkAttrCount   = envLimit{[]string{"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"}, 0, 1 << 12, sdktrace.DefaultAttributePerLinkCountLimit, ""}
)

// read is the variable's value, or its default with a warning when it is not a whole number
// in range.
func (l envLimit) read(log *slog.Logger) int {
	for _, k := range l.keys {
		v, ok := os.LookupEnv(k)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < l.min || n > l.max {
			log.Warn(fmt.Sprintf("%s must be a whole number from %d to %d%s; using %d%s", k, l.min, l.max, l.unit, l.def, l.unit), "got", v)
			return l.def
		}
		return n
	}
	return l.def
}

// batchOptions are the span queue's settings from the environment, checked.
func batchOptions(log *slog.Logger) []sdktrace.BatchSpanProcessorOption {
	queue := bspQueueSize.read(log)
	batch := bspBatchSize.read(log)
	if batch > queue {
		log.Warn("OTEL_BSP_MAX_EXPORT_BATCH_SIZE is over OTEL_BSP_MAX_QUEUE_SIZE; using the queue's size", "batch", batch, "queue", queue)
		batch = queue
	}
	return []sdktrace.BatchSpanProcessorOption{
		sdktrace.WithMaxQueueSize(queue),
		sdktrace.WithMaxExportBatchSize(batch),
		sdktrace.WithBatchTimeout(time.Duration(bspScheduleDelay.read(log)) * time.Millisecond),
		sdktrace.WithExportTimeout(time.Duration(bspExportTimeout.read(log)) * time.Millisecond),
	}
}

// spanLimits are the span limits from the environment, checked.
func spanLimits(log *slog.Logger) sdktrace.SpanLimits {
	s := sdktrace.NewSpanLimits()
	s.AttributeValueLengthLimit = attrValueLength.read(log)
	s.AttributeCountLimit = attrCount.read(log)
	s.EventCountLimit = eventCount.read(log)
	s.AttributePerEventCountLimit = eventAttrCount.read(log)
	s.LinkCountLimit = linkCount.read(log)
	s.AttributePerLinkCountLimit = linkAttrCount.read(log)
	return s
}

// exporterTimeout is the OTLP exporter's timeout from the environment, checked.
func exporterTimeout(log *slog.Logger) time.Duration {
	return time.Duration(exportTimeout.read(log)) * time.Millisecond
}
