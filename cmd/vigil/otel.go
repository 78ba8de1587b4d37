package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigilrun/vigil"
)

// tracing is the OpenTelemetry setup of serve, run and mcp: the provider
// for vigil.Options (nil when tracing is off), whether spans may carry the
// conversation's text, and shutdown, which flushes what is buffered.
type tracing struct {
	provider *sdktrace.TracerProvider
	content  bool
}

// otelShutdownTimeout bounds the flush of buffered spans on exit.
const otelShutdownTimeout = 5 * time.Second

// setupTracing reads the standard OTEL_* variables. Tracing is on when
// OTEL_TRACES_EXPORTER is otlp or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT), and off
// when none is set, OTEL_TRACES_EXPORTER is none or OTEL_SDK_DISABLED is
// true. The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc.
// OTEL_SERVICE_NAME (default vigil) and OTEL_RESOURCE_ATTRIBUTES describe
// the resource; OTEL_EXPORTER_OTLP_HEADERS and _TRACES_HEADERS are sent with
// each export. The exporters read the other OTLP variables (timeout,
// compression, certificates) themselves. Spans carry prompts and replies
// only with VIGIL_TRACE_CONTENT=1 or
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
func setupTracing(ctx context.Context, getenv func(string) string) (*tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return &tracing{}, nil
	}
	tracesEP := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	baseEP := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return &tracing{}, nil
	case "":
		if tracesEP == "" && baseEP == "" {
			return &tracing{}, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: vigil exports traces with otlp, or none", exp)
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	headers, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	th, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_HEADERS: %w", err)
	}
	for k, v := range th {
		headers[k] = v
	}
	var exporter sdktrace.SpanExporter
	switch proto {
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		switch {
		case tracesEP != "":
			opts = append(opts, otlptracehttp.WithEndpointURL(tracesEP))
		case baseEP != "":
			// The signal's path is appended to the base endpoint.
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(baseEP, "/")+"/v1/traces"))
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		exporter, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		switch {
		case tracesEP != "":
			opts = append(opts, otlptracegrpc.WithEndpointURL(tracesEP))
		case baseEP != "":
			opts = append(opts, otlptracegrpc.WithEndpointURL(baseEP))
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		exporter, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTLP protocol %q: vigil sends http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := tracingResource(ctx, getenv)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(vigil.TraceIDGenerator()),
	)
	content := strings.TrimSpace(getenv("VIGIL_TRACE_CONTENT")) == "1" ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")), "true")
	return &tracing{provider: tp, content: content}, nil
}

// tracerProvider is the provider for vigil.Options.TracerProvider: nil
// (not a nil pointer in an interface) when tracing is off.
func (t *tracing) tracerProvider() trace.TracerProvider {
	if t.provider == nil {
		return nil
	}
	return t.provider
}

// shutdown flushes buffered spans and stops the exporter; it is a no-op
// when tracing is off.
func (t *tracing) shutdown() error {
	if t.provider == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), otelShutdownTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

// tracingResource describes the process: service.name from
// OTEL_SERVICE_NAME (vigil when unset) over OTEL_RESOURCE_ATTRIBUTES, and
// the SDK.
func tracingResource(ctx context.Context, getenv func(string) string) (*resource.Resource, error) {
	kv, err := parseKeyValues(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if _, ok := kv["service.name"]; !ok {
		kv["service.name"] = "vigil"
	}
	if n := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); n != "" {
		kv["service.name"] = n
	}
	attrs := make([]attribute.KeyValue, 0, len(kv))
	for k, v := range kv {
		attrs = append(attrs, attribute.String(k, v))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}

// parseKeyValues parses the W3C-baggage-like lists of the OTEL_* variables:
// key=value pairs separated by commas, values percent-encoded.
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", p)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("value of %s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}
